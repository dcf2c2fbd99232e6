"""The engine, I/O-free: a policy compiled into a plan, the operations (generators that yield
script calls and take the replies), what a store failure answers (fallbacks, the breaker),
the deny cache and the part of the guards that is not I/O. The guards
(``freqguard/_async/guard.py`` and its generated sync twin) only drive it.
"""
