"""Which block transitions l -> l+1 a run can analyse (the block stage's grid over layers)."""


def transition_points(n_layers: int, layers: list[int]) -> list[int]:
    """Transitions l -> l+1 available when `layers` were extracted: l and l+1 both selected."""
    sel = set(layers)
    return [L for L in sorted(sel) if L + 1 in sel and L + 1 < n_layers]
