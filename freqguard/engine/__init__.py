"""The engine, I/O-free: a policy compiled into a plan, the operations (generators that yield
script calls and take the replies), what a store failure answers (fallbacks, the breaker),
the deny cache, and the components a guard is composed of, one object per job (the registry,
the failover, the deny cache's use, the accounting of store calls, the operations prepared,
the receipts). The guards (``freqguard/_async/guard.py`` and its generated sync copy) hold
the components and drive the operations.
"""
