"""The certification figures' names (= file names under figures/certify/{model}/), drawn by
`certify.figures.FIGURES`. Apart from the drawing code so that the workflow lists its targets without
importing matplotlib: every cluster job parses the workflow again."""

FIGURE_NAMES = ("relative_gap_vs_radius", "gap_over_secant_bound", "certified_within", "relative_gap_spread")
