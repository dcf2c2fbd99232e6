-- The tail of the FUNCTION LOAD library (freqguard/script/library.py FUNCTION_TAIL): it
-- registers the entry points of lua/entries.lua as Redis Functions, under the library's
-- name (__LIBRARY__, which the client replaces by a digest of the joined code). Another
-- tail may end the same body instead (an EVAL script would call an entry point itself).
--
-- The policy function under two names, and the binned one under two more. Redis refuses a
-- function that may write once used memory is past maxmemory, unless it is flagged
-- allow-oom: the first name, for hits, is refused then (a full server takes no new state);
-- the second (freqguard/backends/_library.py: FUNCTION_NOGROW) serves the calls that never
-- grow what is stored, CHECK, REFUND, RESET and a HIT of cost 0, so a full server can still
-- be read, refunded and emptied. It refuses a hit that would consume, whoever calls it.
redis.register_function('__LIBRARY__', function(keys, argv) return policy(keys, argv) end)
redis.register_function{
  function_name = '__LIBRARY___nogrow',
  callback = function(keys, argv) return nogrow(keys, argv) end,
  flags = {'allow-oom'},
}
redis.register_function('__LIBRARY___bin', binned(policy))
redis.register_function{
  function_name = '__LIBRARY___bin_nogrow',
  callback = binned(nogrow),
  flags = {'allow-oom'},
}
