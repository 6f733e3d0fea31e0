"""The Min-IP figures' names (= file names under figures/minip/) and the inputs each reads besides the
sweep table; `minip.figures.draw` draws them. Apart from the drawing code so that the workflow lists its
targets without importing matplotlib or torch: every cluster job parses the workflow again."""

#: figure name -> the inputs it reads besides the sweep table
FIGURES = {"witness_phase_transition": ("bound", "claims"), "scaling_error_vs_rank": (),
           "transition_rank_vs_size": ("claims",), "transition_rank_by_criterion": ()}
