"""The public names other code relies on (INTERFACES.md, "Python"): a rename must be deliberate."""

from __future__ import annotations

import warden
from warden.core import errors, paths


def test_package_exports_are_pinned() -> None:
    assert sorted(warden.__all__) == [
        "Conflict", "Denied", "InvalidInput", "Locked", "NotFound", "RunResult", "TimedOut",
        "TooLarge", "Unavailable", "Warden", "WardenError", "Workspace"]
    for name in warden.__all__:
        assert getattr(warden, name) is not None


def test_error_codes_are_stable() -> None:
    codes = {cls.__name__: cls.code for cls in (
        errors.InvalidInput, errors.TooLarge, errors.NotFound, errors.Conflict, errors.Locked,
        errors.Denied, errors.TimedOut, errors.Unavailable, errors.WardenError)}
    assert codes == {"InvalidInput": "invalid", "TooLarge": "invalid", "NotFound": "not_found",
                     "Conflict": "conflict", "Locked": "locked", "Denied": "denied",
                     "TimedOut": "timeout", "Unavailable": "unavailable", "WardenError": "internal"}


def test_python_api_shape() -> None:
    from warden.client import Client

    assert callable(warden.Warden.open)
    for method in ("create", "get", "list", "destroy"):
        assert callable(getattr(warden.Warden, method))
    assert callable(warden.Workspace.run)
    assert callable(Client)
    assert paths.within("/ws/a/../b", ["/ws"]) and not paths.within("/ws-evil", ["/ws"])


def test_the_names_imported_lazily_are_listed_by_dir() -> None:
    """`import warden` imports the API and the errors only when first asked for; `dir(warden)`
    (a REPL's completion, pydoc) still lists them, as it did when they were imported at once."""
    assert set(warden.__all__) <= set(dir(warden))
