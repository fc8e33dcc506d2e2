"""A layer's paths are where the layer lies now, whatever folder it was built in."""

from __future__ import annotations

import pytest

from warden.core.layers import Layer, install_unresolvable

LAYER = "/homes/b/layers/py3.11-abc"


def _python(site: object) -> Layer:
    return Layer.from_info({"id": "py3.11-abc", "kind": "python", "site_packages": site}, LAYER)


def test_a_relative_path_is_under_the_layer_where_it_lies() -> None:
    assert _python("venv/lib/python3.11/site-packages").site_packages == \
        f"{LAYER}/venv/lib/python3.11/site-packages"


def test_an_absolute_path_older_code_wrote_follows_the_layer_to_its_new_folder() -> None:
    # Built in home A, then the home (or its layers) moved to B: A's path names B's folder.
    assert _python("/homes/a/layers/py3.11-abc/venv/lib/python3.11/site-packages").site_packages == \
        f"{LAYER}/venv/lib/python3.11/site-packages"


def test_a_path_out_of_the_layer_is_no_path_of_it() -> None:
    for value in ("../py3.11-other/venv", "venv/../../x", "/etc/passwd", "/homes/a/layers/other/venv", "", 7):
        assert _python(value).site_packages is None, value


def test_node_paths_and_bins_follow_the_layer_and_bad_bins_are_dropped() -> None:
    layer = Layer.from_info({"id": "node-1", "kind": "node", "node_modules": "node_modules",
                             "bins": {"tsc": "node_modules/typescript/bin/tsc", "old": "/x/node-1/node_modules/a/b",
                                      "out": "../elsewhere/bin"}}, "/h/layers/node-1")
    assert layer.node_modules == "/h/layers/node-1/node_modules"
    assert dict(layer.bins) == {"tsc": "/h/layers/node-1/node_modules/typescript/bin/tsc",
                                "old": "/h/layers/node-1/node_modules/a/b"}


@pytest.mark.parametrize(("output", "unresolvable"), [
    # pip, the index reached: no such package, no such version.
    ("ERROR: Could not find a version that satisfies the requirement nope (from versions: none)\n"
     "ERROR: No matching distribution found for nope", True),
    ("ERROR: No matching distribution found for six==999.0", True),
    # uv.
    ("  × No solution found when resolving dependencies:\n  ╰─▶ Because nope was not found in the package "
     "registry and you require nope, we can conclude that your requirements are unsatisfiable.", True),
    # npm.
    ("npm error code E404\nnpm error 404 Not Found - GET http://registry/nope - Not found", True),
    ("npm error code ETARGET\nnpm error notarget No matching version found for left-pad@99.0.0.", True),
    # pip says the same "No matching distribution" when it never reached the index: an outage.
    ("WARNING: Retrying (Retry(total=4...)) after connection broken by 'NewConnectionError(...: Failed to "
     "establish a new connection: [Errno 111] Connection refused')': /simple/six/\n"
     "ERROR: Could not find a version that satisfies the requirement six (from versions: none)\n"
     "ERROR: No matching distribution found for six", False),
    ("error: Failed to fetch: `https://pypi.org/simple/six/`\n  Caused by: error sending request", False),
    ("npm error code ENOTFOUND\nnpm error errno ENOTFOUND", False),

    ("Building wheel for x failed: gcc: command not found", False),
])
def test_an_install_the_index_cannot_satisfy_is_told_from_one_that_did_not_reach_it(
        output: str, unresolvable: bool) -> None:
    assert install_unresolvable(output) is unresolvable
