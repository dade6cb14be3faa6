"""The built-in catalog is read with libyaml (catalog.files.ShippedLoader): the same data as the
strict pure-Python loader, which also refuses aliases, and duplicate keys still refused."""

from __future__ import annotations

from importlib import resources

import pytest
import yaml

from catalog.errors import CatalogError
from catalog.files import ShippedLoader, StrictLoader, parse_yaml_text


@pytest.mark.parametrize("name", ["devices", "models", "platforms", "precisions"])
def test_shipped_files_read_the_same_with_both_loaders(name):
    text = resources.files("catalog").joinpath("data", f"{name}.yaml").read_text("utf-8")
    assert yaml.load(text, Loader=ShippedLoader) == yaml.load(text, Loader=StrictLoader)  # noqa: S506


def test_shipped_calibration_parameters_read_the_same_with_both_loaders():
    from optimizer.models.params import shipped_params_path  # noqa: PLC0415 - catalog tests import no optimizer at top

    text = shipped_params_path().read_text("utf-8")
    assert yaml.load(text, Loader=ShippedLoader) == yaml.load(text, Loader=StrictLoader)  # noqa: S506


def test_shipped_loader_refuses_duplicate_keys_at_any_depth():
    with pytest.raises(CatalogError, match="duplicate key 'b' at line 3 \\(first at line 2\\)"):
        parse_yaml_text("a:\n  b: 1\n  b: 2\n", "t.yaml", CatalogError, shipped=True)
