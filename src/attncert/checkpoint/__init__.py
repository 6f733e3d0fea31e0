"""Certify one head of any supported local checkpoint, without a pipeline run (the `attncert certify` command).

    checkpoint_input  CheckpointInputError: bad input, one line naming the fix
    family            which supported family (gpt2, bert) a checkpoint folder holds, from its config
    one_head          the HeadProblem of one head of a checkpoint on a text (through `head.units.head_problem`)
    head_bounds       every bound of one HeadProblem: exact bracket, first order, both second orders, CROWN
    command           the `attncert certify` command line

Above certify and baselines: it imports them, head and pipeline; nothing below imports it.
"""
