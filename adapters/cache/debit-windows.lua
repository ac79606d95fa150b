-- Debits every quota window, or none. Redis runs a script without interleaving any other
-- command, so "debit all, undo all if one refuses" is neither seen nor raced by other clients or
-- replicas.
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
--
-- A positive debit is written first and undone when a window refuses: one command per window on
-- the path nearly every call takes, instead of a read and a write. So a refusal (a rate limit
-- under abuse refuses most requests) writes too, an INCRBY and its undo per window before the one
-- that refused, each replicated and logged like any write; a counter left at 0 by the undo is
-- deleted, which reads the same. Redis's CPU per rate-limit debit (two windows, turns of 13 debits
-- in one script call, as the scale-out bench sends them) fell from 6.4-8.3 to 5.4-6.2 us
-- (alternated); the rate-limit bench's limiter on / off spreads 0.76-0.98 over runs of either script.

-- The counter in `key` (0 when absent), or nil and the raw value when it holds something else.
local function counter(key)
  local raw = redis.call('GET', key)
  if not raw then return 0 end
  if not string.match(raw, '^%-?%d+$') then return nil, raw end
  return tonumber(raw)
end

-- {status, window, count...}: the reply of one debit.
local function reply(status, window, counts)
  local out = {status, window}
  for j = 1, #counts do out[j + 2] = counts[j] end
  return out
end

-- Windows 1..upto, debited by `amount` just now, back as they were: a counter the debit created
-- is deleted (it had no expiry yet), any other lowered again.
local function undo(keys, counts, upto, amount)
  for j = 1, upto do
    if counts[j] == amount then
      redis.call('DEL', keys[j])
    else
      redis.call('DECRBY', keys[j], amount)
    end
    counts[j] = counts[j] - amount
  end
end

local function debit_windows(keys, argv, base)
  local amount = tonumber(argv[base + 1])
  local counts = {}

  if amount > 0 then
    for i, key in ipairs(keys) do
      local count = redis.pcall('INCRBY', key, amount)
      if type(count) == 'table' then
        undo(keys, counts, i - 1, amount)
        -- Only a value that is not an integer is this debit's own failure; anything else (a
        -- replica, full memory, a wrong type) fails the script, as redis.call would have.
        if not string.find(count.err, 'not an integer', 1, true) then error(count) end
        return {2, i - 1, redis.call('GET', key)}
      end
      counts[i] = count
      if count > tonumber(argv[base + 2 * i]) then
        undo(keys, counts, i, amount)
        for j = i + 1, #keys do
          local later, raw = counter(keys[j])
          if later == nil then return {2, j - 1, raw} end
          counts[j] = later
        end
        return reply(0, i - 1, counts)
      end
    end
    for i = 1, #keys do
      -- A window's expiry never changes: set it when the counter is created, not on every debit.
      if counts[i] == amount then
        redis.call('PEXPIREAT', keys[i], argv[base + 2 * i + 1])
      end
    end
    return reply(1, -1, counts)
  end

  for i, key in ipairs(keys) do
    local count, raw = counter(key)
    if count == nil then return {2, i - 1, raw} end
    counts[i] = count
  end

  for i = 1, #keys do
    if counts[i] + amount > tonumber(argv[base + 2 * i]) then return reply(0, i - 1, counts) end
  end
  return reply(1, -1, counts)
end
