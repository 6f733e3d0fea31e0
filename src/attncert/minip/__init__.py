"""Paper B: Min-IP and normalized nonnegative kernel attention.

The task (`task`): Boolean tokens x_1..x_N in {0,1}^m, target t_i = min_{1<=j<=N} <x_i, x_j> at every
position i. The model class (`models`, `constructions`): one head of normalized nonnegative kernel
attention of feature rank r, and a dense softmax head with the same value map and read-out.

Modules, one concept each:
    task           the Min-IP targets and the error criterion
    pools          random token pools with disjoint train/test splits, sequence sampling
    codes          Paley Hadamard matrices and the constant-weight codes built from them
    witness        the structured length-3 witness family
    lower_bound    gap domination -> amplification -> rank lower bound, computed for a family
    constructions  exact constructions (rank 1 for N <= 2, dense softmax and 2^m features for N = 3,
                   rank S + 1 and rank S on the witness family)
    positional     position-dependent kernel heads; why the bound then needs both key orders
    models         torch modules: kernel attention of rank r and dense softmax attention
    realize        raw-bit parameters placing constructions inside the trained torch class
    training       one training run and its evaluation
    sweep          the grid of runs named by the config, aggregation, transition ranks
    tables, plots  the tables and figures of the stage
    measured       the values compared with the paper (share wrong and largest |y - t|)
"""
