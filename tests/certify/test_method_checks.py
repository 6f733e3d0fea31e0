from attncert.certify.method_checks import substitution_vs_enumeration, two_key_gap_slopes


def test_two_key_gap_is_second_order():
    m = two_key_gap_slopes(heads=3, radii=[0.005, 0.01, 0.02, 0.04], seed=0)
    assert m["two_key_heads_unfitted"] == 0
    assert 1.8 <= m["two_key_gap_slope_l2"] <= 2.2
    assert 1.5 <= m["two_key_gap_slope"] <= 2.5


def test_substitutions_match_enumeration():
    m = substitution_vs_enumeration(instances=30, seed=3)
    assert m["substitution_max_rel_err_vs_enumeration"] <= 1e-12
