"""A layer's paths are where the layer lies now, whatever folder it was built in."""

from __future__ import annotations

from warden.core.layers import Layer

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
