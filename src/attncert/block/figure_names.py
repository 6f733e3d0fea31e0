"""The block-residual figures' names (= file names under figures/block/{model}/), drawn by
`block.figures.FIGURES`. Apart from the drawing code so that the workflow lists its targets without
importing matplotlib: every cluster job parses the workflow again."""

FIGURE_NAMES = ("crown_vs_predicted_looseness", "looseness_and_rank", "crown_over_per_op_sum", "certificate_vs_radius")
