"""SAC variants: declarative specs (`VariantSpec`), the catalog of named variants, and one learner."""

from .catalog import CATALOG, REFERENCE, CatalogEntry, get_variant
from .spec import VariantSpec, parse_override, with_overrides

__all__ = ["CATALOG", "REFERENCE", "CatalogEntry", "VariantSpec", "get_variant", "parse_override", "with_overrides"]
