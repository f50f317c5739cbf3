"""Runtime: getting ranks running and keeping them honest.

``torch.distributed.elastic`` starts, supervises and restarts local ranks (:mod:`.launcher`);
torchrun and SLURM start them elsewhere (:mod:`.jobs` reads which). What is ours is only what
elastic does not give, each with its reason in its module: the rendezvous that names missing
ranks and the one-line root cause (:mod:`.rank`), failure detection across nodes in seconds
(:mod:`.watchdog`), data loaded once per node (:mod:`.sharing`), and the rank's view of the
job (:mod:`.context`).

May import: ``errors``, ``records``, ``contracts``.
"""
