"""Application: what the CLI and ``gnnbridge.run / evaluate / predict`` call.

resolve (:mod:`.resolve`) -> preflight and data checks (:mod:`.preflight`) -> run folder
(:mod:`.rundir`) -> what to do: fresh, resumed or restarted (:mod:`.plan`) -> launch and train
(:mod:`.train`) -> results (:mod:`.results`); and using a trained model (:mod:`.inference`),
built from the same pieces; a link task cut into a partitioned folder's parts
(:mod:`.partitioning`), whose record a run of the folder whole builds.

May import: every layer below.
"""
