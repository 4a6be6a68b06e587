"""The committed type stub of sluice.fn matches the operator schemas (static IDEs complete from it)."""

from sluice import _stubs


def test_fn_stub_is_current():
    assert _stubs.main(["--check"]) == 0, "run: python -m sluice._stubs"
