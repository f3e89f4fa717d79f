"""Training: the gradient trainer and its RL step (trainer, collect, scorer, updater), the run around every
loop (run, loop, budgets, callbacks, checkpoints, logging), the config and its YAML, data parallelism and
sharding."""
