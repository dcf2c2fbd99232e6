"""The script: one call decides every rule of a policy's part, in Redis (the Lua twin) or
in process (:mod:`~freqguard.script.twin`), and both twins make the same decisions.

- :mod:`~freqguard.script.contract`: what both twins agree on (codes, formats, the call's
  argument layout);
- :mod:`~freqguard.script.keys`: where a policy's state lives;
- :mod:`~freqguard.script.calls`: the call and its reply;
- :mod:`~freqguard.script.strategies`: each strategy's arithmetic, one module each;
- :mod:`~freqguard.script.twin`: the Python twin of the Lua's (``lua/twin.lua``);
- :mod:`~freqguard.script.library`: the Lua files (each strategy's beside its module, the
  rest in ``lua/``) and the one library they join into.

Nothing here does I/O.
"""
