"""Pure engines: the multi-source chunk planner (``chunks``), the small-file planner (``smallfiles``) and the
multipath striping rule (``striping``). They take measurements and ``now`` and return decisions, as h11 does.

They must not import trio, httpx, the file system or anything else of the client: stdlib only.
"""
