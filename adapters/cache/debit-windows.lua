-- Debits every quota window, or none. Redis runs a script without interleaving any other
-- command, so "check all, then debit all" cannot be raced by other clients or replicas.
--
-- debit_windows(keys, argv, base); the scripts that load this file end with a call to it.
-- keys[i]               counter of window i
-- argv[base + 1]        amount to add to every window
-- argv[base + 2i]       limit of window i
-- argv[base + 2i + 1]   expiresAt of window i (Unix ms); the counter disappears then
--
-- Reply: {1, -1, count...}        debited; counts after the debit
--        {0, i, count...}         refused by window i (0-based); counts unchanged
--        {2, i, raw}              window i holds something that is not an integer counter

local function debit_windows(keys, argv, base)
  local amount = tonumber(argv[base + 1])
  local counts = {}

  for i, key in ipairs(keys) do
    local raw = redis.call('GET', key)
    if raw then
      if not string.match(raw, '^%-?%d+$') then
        return {2, i - 1, raw}
      end
      counts[i] = tonumber(raw)
    else
      counts[i] = 0
    end
  end

  for i = 1, #keys do
    if counts[i] + amount > tonumber(argv[base + 2 * i]) then
      local reply = {0, i - 1}
      for j = 1, #keys do
        reply[j + 2] = counts[j]
      end
      return reply
    end
  end

  local reply = {1, -1}
  for i, key in ipairs(keys) do
    if amount > 0 then
      counts[i] = redis.call('INCRBY', key, amount)
      -- A window's expiry never changes: set it when the counter is created, not on every debit.
      if counts[i] == amount then
        redis.call('PEXPIREAT', key, argv[base + 2 * i + 1])
      end
    end
    reply[i + 2] = counts[i]
  end
  return reply
end
