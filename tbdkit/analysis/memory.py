"""memory.json: the paper's GPU memory breakdown (Fig. 8). Each category is its maximum ever
allocated; 'dynamic' is non-workspace data allocated during iterations (optimizer state);
unattributed = peak - sum of the measured categories, so the parts add up to the peak.
'category_shares' is each category's share of the five together (the paper's Obs. 10 shares),
null with the reason unless all five were measured."""

from __future__ import annotations

from typing import Any

CATEGORIES = ("weights", "weight_gradients", "feature_maps", "workspace", "dynamic")


def entry(value: int | None, method: str, reason: str | None = None) -> dict[str, Any]:
    if value is None and not reason:
        raise ValueError("a memory category without bytes must say why")
    return {
        "bytes": None if value is None else int(value),
        "method": method,
        "reason": None if value is not None else reason,
    }


def breakdown(device: str, categories: dict[str, dict[str, Any]], peak: dict[str, Any]) -> dict[str, Any]:
    """The memory.json document. Missing categories are an error (every one is measured or says why)."""
    absent = [c for c in CATEGORIES if c not in categories]
    if absent:
        raise ValueError(f"memory categories not accounted for: {absent}")
    known = sum(categories[c]["bytes"] or 0 for c in CATEGORIES)
    method = "peak - sum of the measured categories (inputs, allocator rounding, unmeasured categories)"
    if peak["bytes"] is None:
        unattributed = entry(None, method, f"no peak to attribute against: {peak['reason']}")
    else:
        unattributed = entry(peak["bytes"] - known, method)
    return {
        "device": device,
        "unit": "bytes",
        "categories": {c: categories[c] for c in CATEGORIES},
        "peak": peak,
        "unattributed": unattributed,
        "category_shares": category_shares(categories),
    }


def category_shares(categories: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """{'values': {category: share 0..1} over the five categories' sum, 'over', 'method', 'reason'};
    values is null with the reason when any category is unmeasured: a share of the measured ones
    alone would overstate each of them."""
    method = "bytes of each category / sum of the five categories (weights, weight gradients, feature maps, workspace, dynamic)"
    unknown = [c for c in CATEGORIES if categories[c]["bytes"] is None]
    total = sum(categories[c]["bytes"] or 0 for c in CATEGORIES)
    if unknown:
        reason = "not measured: " + "; ".join(f"{c} ({categories[c]['reason']})" for c in unknown)
    elif total <= 0:
        reason = "the five categories sum to zero bytes"
    else:
        return {
            "over": list(CATEGORIES),
            "values": {c: categories[c]["bytes"] / total for c in CATEGORIES},
            "method": method,
            "reason": None,
        }
    return {"over": list(CATEGORIES), "values": None, "method": method, "reason": reason}


def shares(doc: dict[str, Any]) -> dict[str, float | None]:
    """Each category's share of the peak (0..1), None where either is unknown."""
    peak = doc["peak"]["bytes"]
    out: dict[str, float | None] = {}
    for name, cat in [*doc["categories"].items(), ("unattributed", doc["unattributed"])]:
        out[name] = None if not peak or cat["bytes"] is None else cat["bytes"] / peak
    return out
