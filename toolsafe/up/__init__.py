"""``toolsafe up``: the gateway with its status page, a worker and beat in one process
tree (and the example downstream with ``--example``)."""
