import { createHash } from 'node:crypto';

/**
 * Versioned migrations of the PostgreSQL event store. Each runs once per schema, in order, inside
 * one transaction that also records its version in `schema_migrations`; a session-level advisory
 * lock keeps two processes starting at once from applying the same version twice. Never edit a
 * shipped migration: append a new version.
 */
export interface Migration {
  version: number;
  name: string;
  sql: (names: SchemaNames) => string;
}

export interface SchemaNames {
  /** The quoted schema identifier. */
  schema: string;
  /** The NOTIFY channel appends signal on (one per schema). */
  channel: string;
  /**
   * Int4 keys of the schema's advisory locks: version 1 serialised appends under both; from
   * version 2 the second one, paired with a stream's hash, is that stream's append lock.
   */
  lockKeys: [number, number];
  /**
   * From version 9: the session setting a connection sets once it has checked the schema's
   * position base since it connected (see baseGuard).
   */
  guard: string;
}

/**
 * Positions a transaction can hand out (version 2): a position is the writing transaction's id
 * times this, plus the schema's base, plus the event's ordinal in the transaction. 2^16 keeps
 * positions exact in a double for 2^37 transactions.
 */
export const POSITIONS_PER_TRANSACTION = 65_536;

/**
 * Transaction ids the base skips at each server start and each crash restart (see positionGuard):
 * far more than a crash can lose (the WAL writer flushes every wal_writer_delay), and
 * 2^37 / 2^22 = 32,768 restarts before positions leave a double's exact range.
 */
const RESTART_MARGIN_TRANSACTIONS = 4_194_304;

/** Namespace key of every advisory lock this adapter takes ("ESPG"). */
const LOCK_NAMESPACE = 0x45535047;

export function schemaNames(schema: string): SchemaNames {
  if (!/^[a-z_][a-z0-9_]{0,62}$/.test(schema)) {
    throw new Error(
      `postgres event store: schema name ${JSON.stringify(schema)} must match [a-z_][a-z0-9_]*`,
    );
  }
  const digest = createHash('sha256').update(schema).digest();
  return {
    schema: `"${schema}"`,
    channel: `events_${digest.subarray(0, 8).toString('hex')}`,
    lockKeys: [LOCK_NAMESPACE, digest.readInt32BE(8)],
    guard: `es_position_guard.${schema}`,
  };
}

/** The advisory lock key (one bigint) under which migrations of a schema run. */
export function migrationLockKey(schema: string): bigint {
  return createHash('sha256').update(`migrate:${schema}`).digest().readBigInt64BE(0);
}

/**
 * The condition that finds the stored event of an id (`value`, an SQL expression) in `events e`,
 * as each version's functions write it.
 */
type IdMatch = (value: string) => string;

/** Versions 1-3: an equality on the id, probing the unique index on `id`. */
const plainIdMatch: IdMatch = (value) => `e.id = ${value}`;

/**
 * An id's version digit (its 15th character: 7 for a time-ordered UUID, 4 for a random one, 5 for
 * one derived from its content), the first column of the id index from version 4. A "char" (one
 * byte) fits in the padding of an index entry, so entries of other ids stay 48 bytes (an integer
 * made them 56); and unlike a boolean (whether the digit is 7), a comparison with a constant is not
 * rewritten by the planner (`(… = '7') = false` became `… <> '7'`, which no longer matched the
 * index's column, and the look-up read the whole index).
 */
const versionDigit = (id: string) => `(substr(${id}, 15, 1)::"char")`;

/**
 * From version 4: the same equality, with the first column of the id index (the version digit)
 * spelled out, so that the look-up is a probe of that index: a condition on its second column alone
 * would read it all.
 */
export const orderedIdMatch: IdMatch = (value) =>
  `${versionDigit('e.id')} = ${versionDigit(value)} AND e.id = ${value}`;

/**
 * Version 3's append functions (append_members, and append_group over it), their id look-ups
 * written by `idMatch`. Version 3 created them; version 4 replaces them with its look-ups, the rest
 * unchanged.
 */
function appendFunctions(
  { schema, lockKeys, guard }: Pick<SchemaNames, 'schema' | 'lockKeys' | 'guard'>,
  idMatch: IdMatch,
  create: 'CREATE FUNCTION' | 'CREATE OR REPLACE FUNCTION',
  version: 3 | 6 | 7 | 9 = 3,
): string {
  const v6 = version >= 6;
  const v9 = version >= 9;
  return `${create} ${schema}.append_members(
  p_base bigint, p_streams text[], p_expected text[], p_counts integer[],
  p_ids text[], p_types text[], p_correlation text[], p_causation text[], p_data json[]
) RETURNS TABLE (idx integer, code text, detail text, next_revision bigint, head bigint)
LANGUAGE plpgsql AS $fn$
DECLARE
  v_ord integer := 0;
  v_off integer := 0;
  v_n integer;
  v_stream text;
  v_expected text;
  v_current bigint;
  v_first record;
  v_row record;
  v_bad text;
BEGIN
  FOR i IN 1..coalesce(cardinality(p_streams), 0) LOOP
    v_stream := p_streams[i];
    v_expected := p_expected[i];
    v_n := p_counts[i];
    v_bad := NULL;
    IF v_n > 0 THEN
      SELECT e.stream, e.revision, e.position INTO v_first FROM ${schema}.events e WHERE ${idMatch('p_ids[v_off + 1]')};
      IF FOUND THEN
        -- A retry: idempotent only when every id is the same consecutive run of this stream.
        IF v_first.stream <> v_stream THEN
          v_bad := p_ids[v_off + 1];
        ELSE
          v_row := v_first;
          FOR j IN 2..v_n LOOP
            SELECT e.stream, e.revision, e.position INTO v_row FROM ${schema}.events e WHERE ${idMatch('p_ids[v_off + j]')};
            IF NOT FOUND OR v_row.stream <> v_stream OR v_row.revision <> v_first.revision + j - 1 THEN
              v_bad := p_ids[v_off + j];
              EXIT;
            END IF;
          END LOOP;
        END IF;
        IF v_bad IS NULL THEN
          RETURN QUERY SELECT i, NULL::text, NULL::text, v_row.revision, v_row.position;
        ELSE
          RETURN QUERY SELECT i, 'ES002'::text, v_bad, NULL::bigint, NULL::bigint;
        END IF;
        v_off := v_off + v_n;
        CONTINUE;
      END IF;
    END IF;

${
  v6
    ? `    v_current := ${headRevision(schema, 'v_stream', 'v_expected')};`
    : `    SELECT max(e.revision) INTO v_current FROM ${schema}.events e WHERE e.stream = v_stream;`
}
    IF NOT coalesce(
      v_expected = 'any'
      OR (v_expected = 'no_stream' AND v_current IS NULL)
      OR (v_expected = 'stream_exists' AND v_current IS NOT NULL)
      OR (v_expected ~ '^-?[0-9]+$' AND v_current = v_expected::bigint),
      false
    ) THEN
      RETURN QUERY SELECT i, 'ES001'::text, coalesce(v_current::text, ''), NULL::bigint, NULL::bigint;
    ELSIF v_n = 0 THEN
      RETURN QUERY SELECT i, NULL::text, NULL::text, coalesce(v_current, -1),
        (SELECT coalesce(max(e.position), 0) FROM ${schema}.events e);
    ELSE
      IF v_ord + v_n >= ${POSITIONS_PER_TRANSACTION} THEN
        RAISE EXCEPTION 'a group holds at most % events', ${POSITIONS_PER_TRANSACTION} - 1 USING ERRCODE = 'ES003';
      END IF;
      INSERT INTO ${schema}.events
        (position, id, stream, revision, type, recorded_at, correlation_id, causation_id, data)
      SELECT p_base + v_ord + u.ord, u.id, v_stream, coalesce(v_current, -1) + u.ord, u.type, now(),
             coalesce(u.correlation, u.id), u.causation, u.data
      FROM unnest(p_ids[v_off + 1 : v_off + v_n], p_types[v_off + 1 : v_off + v_n],
                  p_correlation[v_off + 1 : v_off + v_n], p_causation[v_off + 1 : v_off + v_n],
                  p_data[v_off + 1 : v_off + v_n])
        WITH ORDINALITY AS u(id, type, correlation, causation, data, ord);
      v_ord := v_ord + v_n;
      RETURN QUERY SELECT i, NULL::text, NULL::text, coalesce(v_current, -1) + v_n, p_base + v_ord;
    END IF;
    v_off := v_off + v_n;
  END LOOP;
END
$fn$;

-- The same arguments, answers and errors as version 2's, so processes of either version share a log.
CREATE OR REPLACE FUNCTION ${schema}.append_group(
  p_streams text[], p_expected text[], p_counts integer[], p_sync boolean,
  p_ids text[], p_types text[], p_correlation text[], p_causation text[], p_data json[]
) RETURNS TABLE (idx integer, code text, detail text, next_revision bigint, head bigint)
-- Generic plans, always: a group of one append looked cheap enough to the planner for a fresh
-- plan of each statement on every call, which cost more than the statements themselves.
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $fn$
DECLARE
  v_apps integer := coalesce(cardinality(p_streams), 0);
  v_base bigint;${v9 ? '' : '\n  v_started timestamptz;'}
  v_setting text;
  v_known boolean;
  v_names text[];
  v_revs bigint[];
  v_k integer;
  v_n integer;
  v_expected text;
  v_current bigint;
  v_ord integer := 0;
  v_off integer := 0;
  -- Per event: the member that writes it (0: its member was refused).
  v_member integer[];
  -- Per member: events, positions and revision before its first event.
  v_moff integer[];
  v_mord integer[];
  v_mrev bigint[];
  -- Per member: its answer.
  r_code text[];
  r_detail text[];
  r_next bigint[];
  r_head bigint[];${
    v6
      ? `
  v_keys integer;
  v_written bigint;`
      : ''
  }
BEGIN
  IF v_apps = 0 THEN
    RETURN;
  END IF;
  IF NOT p_sync THEN
    -- An assignment, not a PERFORM: evaluated without a statement of its own.
    v_setting := set_config('synchronous_commit', 'off', true);
  END IF;
  -- Each stream's lock, in key order (two groups cannot deadlock), in one statement.${
    v6
      ? `
  -- Counted: as many locks as members means no stream twice (two streams sharing a hash are
  -- decided member by member below). The position base is read in the same statement.
  SELECT l.n, b.base${v9 ? '' : ', b.started'} INTO v_keys, v_base${v9 ? '' : ', v_started'}
    FROM (SELECT count(pg_advisory_xact_lock(${lockKeys[1]}, k.h)) AS n
            FROM (SELECT DISTINCT hashtext(s) AS h FROM unnest(p_streams) AS s ORDER BY 1) AS k) AS l,
         ${schema}.position_base b;`
      : `
  PERFORM pg_advisory_xact_lock(${lockKeys[1]}, k.h)
     FROM (SELECT DISTINCT hashtext(s) AS h FROM unnest(p_streams) AS s ORDER BY 1) AS k;`
  }
${
  v9
    ? baseGuard(schema, guard)
    : `  -- The base moves once per server start, as in version 2.${
        v6
          ? ''
          : `
  SELECT b.base, b.started INTO v_base, v_started FROM ${schema}.position_base b;`
      }
${startBaseMove(schema)}`
}
  v_base := pg_current_xact_id()::text::bigint * ${POSITIONS_PER_TRANSACTION} + v_base;

  -- One append alone costs fewer statements decided on its own.
  IF v_apps = 1 THEN
    RETURN QUERY SELECT * FROM ${schema}.append_members(
      v_base, p_streams, p_expected, p_counts, p_ids, p_types, p_correlation, p_causation, p_data);
    RETURN;
  END IF;
${v6 ? setWiseGroup(schema, version >= 7) : ''}
  -- Under the locks, in one statement: whether any id is stored already, and the revision of each
  -- stream. Each look-up an equality in a scalar subquery: its plan is an index probe whatever the
  -- table's size when the plan was made (\`id = ANY (p_ids)\`, planned on a young table, scanned
  -- the whole table on every call after).
  SELECT (SELECT bool_or((SELECT true FROM ${schema}.events e WHERE ${idMatch('i.id')})) FROM unnest(p_ids) AS i(id)),
         r.names, r.revs
    INTO v_known, v_names, v_revs
    FROM (SELECT array_agg(d.s) AS names,
                 array_agg((SELECT max(e.revision) FROM ${schema}.events e WHERE e.stream = d.s)) AS revs
            FROM (SELECT DISTINCT s FROM unnest(p_streams) AS s) AS d) r;
  -- A stored id: a retry, or a reuse. Each member decided on its own.
  IF v_known THEN
    RETURN QUERY SELECT * FROM ${schema}.append_members(
      v_base, p_streams, p_expected, p_counts, p_ids, p_types, p_correlation, p_causation, p_data);
    RETURN;
  END IF;

  v_member := '{}';
  v_moff := array_fill(0, ARRAY[v_apps]);
  v_mord := array_fill(0, ARRAY[v_apps]);
  v_mrev := array_fill(0::bigint, ARRAY[v_apps]);
  r_code := array_fill(NULL::text, ARRAY[v_apps]);
  r_detail := array_fill(NULL::text, ARRAY[v_apps]);
  r_next := array_fill(NULL::bigint, ARRAY[v_apps]);
  r_head := array_fill(NULL::bigint, ARRAY[v_apps]);
  FOR i IN 1..v_apps LOOP
    v_n := p_counts[i];
    v_expected := p_expected[i];
    v_k := array_position(v_names, p_streams[i]);
    v_current := v_revs[v_k];
    IF NOT coalesce(
      v_expected = 'any'
      OR (v_expected = 'no_stream' AND v_current IS NULL)
      OR (v_expected = 'stream_exists' AND v_current IS NOT NULL)
      OR (v_expected ~ '^-?[0-9]+$' AND v_current = v_expected::bigint),
      false
    ) THEN
      r_code[i] := 'ES001';
      r_detail[i] := coalesce(v_current::text, '');
      IF v_n > 0 THEN
        v_member := v_member || array_fill(0, ARRAY[v_n]);
      END IF;
    ELSIF v_n = 0 THEN
      r_next[i] := coalesce(v_current, -1);
      IF v_ord > 0 THEN
        r_head[i] := v_base + v_ord;
      ELSE
        r_head[i] := (SELECT coalesce(max(e.position), 0) FROM ${schema}.events e);
      END IF;
    ELSE
      IF v_ord + v_n >= ${POSITIONS_PER_TRANSACTION} THEN
        RAISE EXCEPTION 'a group holds at most % events', ${POSITIONS_PER_TRANSACTION} - 1 USING ERRCODE = 'ES003';
      END IF;
      v_member := v_member || array_fill(i, ARRAY[v_n]);
      v_moff[i] := v_off;
      v_mord[i] := v_ord;
      v_mrev[i] := coalesce(v_current, -1);
      v_ord := v_ord + v_n;
      v_revs[v_k] := coalesce(v_current, -1) + v_n;
      r_next[i] := coalesce(v_current, -1) + v_n;
      r_head[i] := v_base + v_ord;
    END IF;
    v_off := v_off + v_n;
  END LOOP;

  IF v_ord > 0 THEN
    -- Ids repeated across members trip the unique index and fail the whole group; the adapter
    -- then appends each member alone (see postgres.ts).
    INSERT INTO ${schema}.events
      (position, id, stream, revision, type, recorded_at, correlation_id, causation_id, data)
    SELECT v_base + v_mord[u.m] + (u.ord - v_moff[u.m]), u.id, p_streams[u.m],
           v_mrev[u.m] + (u.ord - v_moff[u.m]), u.type, now(), coalesce(u.correlation, u.id),
           u.causation, u.data
      FROM unnest(p_ids, p_types, p_correlation, p_causation, p_data, v_member)
        WITH ORDINALITY AS u(id, type, correlation, causation, data, m, ord)
     WHERE u.m > 0;
  END IF;
  RETURN QUERY SELECT r.i::integer, r.c, r.d, r.nx, r.h
    FROM unnest(r_code, r_detail, r_next, r_head) WITH ORDINALITY AS r(c, d, nx, h, i);
END
$fn$;
`;
}

/**
 * From version 6: a stream's last revision, found from the member's expected revision. The index on
 * (stream, revision) answers max(revision) by reading backwards from the stream's end, and a leaf
 * page is read whole: every entry of the stream on that page was compared (a 300-event stream cost
 * 8 µs, most of a group's look-ups). Bounded below by the expected revision, the read stops at the
 * first entry under it: one entry when the expectation holds. Without a number to start from ('any',
 * 'stream_exists', 'no_stream'), or when the stream is behind it, the whole maximum is taken.
 */
function headRevision(schema: string, stream: string, expected: string): string {
  return `coalesce(
      (SELECT max(e.revision) FROM ${schema}.events e WHERE e.stream = ${stream}
          AND e.revision >= CASE WHEN ${expected} ~ '^[0-9]+$' THEN ${expected}::bigint END),
      (SELECT max(e.revision) FROM ${schema}.events e WHERE e.stream = ${stream}))`;
}

/**
 * The update that moves the position base past a server (re)start: a margin of transactions on,
 * and past the log's last position (without its WHERE or the statement's end). One text for every
 * version that moves the base; the shipped versions' digests pin it, indentation included.
 */
function restartedBase(schema: string, indent: string): string {
  return [
    `UPDATE ${schema}.position_base b`,
    '   SET base = greatest(',
    `         b.base + ${RESTART_MARGIN_TRANSACTIONS}::bigint * ${POSITIONS_PER_TRANSACTION},`,
    `         (SELECT coalesce(max(e.position), 0) FROM ${schema}.events e) + 1`,
    `           - pg_current_xact_id()::text::bigint * ${POSITIONS_PER_TRANSACTION}),`,
    '       started = pg_postmaster_start_time()',
  ]
    .map((line) => indent + line)
    .join('\n');
}

/**
 * Versions up to 8: the base moves when the server's start differs from the one it last moved at
 * (`v_started`, read beside `v_base`), and is read again. Shared text of append_group and
 * append_group_unlocked; the shipped versions' digests pin it.
 */
function startBaseMove(schema: string): string {
  return `  IF v_started IS DISTINCT FROM pg_postmaster_start_time() THEN
${restartedBase(schema, '    ')}
     WHERE b.started IS DISTINCT FROM pg_postmaster_start_time();
    SELECT b.base INTO v_base FROM ${schema}.position_base b;
  END IF;`;
}

/**
 * From version 9: the first append of each session checks the position base (position_guard), later
 * ones only read the session setting that says it was checked. Both a server start and a crash
 * restart end every session, so a session that has checked did so after the last of them. Expects
 * `v_base` read from position_base; reads it again when it checks.
 */
function baseGuard(schema: string, guard: string): string {
  return `  -- The base moves once per server start and once per crash restart (position_guard).
  IF current_setting('${guard}', true) IS DISTINCT FROM 'on' THEN
    v_base := ${schema}.position_guard();
  END IF;`;
}

/**
 * Version 9's position_guard: the marker is an unlogged table, which crash recovery empties, holding
 * the server start it was written under (pg_postmaster_start_time stays through a crash restart, and
 * a marker kept through a clean one names the start before it). The transaction that writes the
 * marker moves the base; another session's check waits on the marker's key until that one ends and
 * then finds it written. The move is flushed before its commit returns even in an append that asked
 * for less: lost in a second crash, it would come again from the old base, under the ids of the
 * transactions lost with it. Answers the base.
 */
function positionGuard(schema: string, guard: string): string {
  return `CREATE UNLOGGED TABLE ${schema}.position_marker (started timestamptz PRIMARY KEY);

CREATE FUNCTION ${schema}.position_guard() RETURNS bigint
LANGUAGE plpgsql AS $fn$
DECLARE
  v_setting text;
  v_base bigint;
BEGIN
  INSERT INTO ${schema}.position_marker (started) VALUES (pg_postmaster_start_time()) ON CONFLICT DO NOTHING;
  IF FOUND THEN
    IF current_setting('synchronous_commit') = 'off' THEN
      v_setting := set_config('synchronous_commit', 'on', true);
    END IF;
${restartedBase(schema, '    ')};
    DELETE FROM ${schema}.position_marker WHERE started <> pg_postmaster_start_time();
  END IF;
  -- For the session (undone with its transaction, if that rolls back).
  v_setting := set_config('${guard}', 'on', false);
  SELECT b.base INTO v_base FROM ${schema}.position_base b;
  RETURN v_base;
END
$fn$;
`;
}

/**
 * Version 6's group when each stream is in it once and every member has events: one statement reads
 * every stream's revision, decides every member, inserts the events of those whose expectation holds
 * and answers them. Ids are not looked up first: a stored one (a retry, or a reuse) trips the unique
 * index and fails the statement, and the adapter then appends each member alone, where its ids are
 * looked up (append_members). A member refused may be a retry of one that was written (its
 * expectation held then), so it is decided again alone, ids first, by append_members: with its stream
 * in the group once, nothing else in the group bears on it. Anything else (a stream twice, an empty
 * member) is decided member by member, as in version 3.
 */
function setWiseGroup(schema: string, onlyUnwritten: boolean): string {
  // The revision is read in a level the planner keeps as it is (the window function's, or behind
  // OFFSET 0): read in a plain subquery, its look-ups were copied into each of the five uses above
  // it. Read from the expected revision (see headRevision), and no further: a stream behind it
  // reads as none, which refuses the member as its own revision would, and a refused member's
  // revision is read again whole when it is decided alone. The expected revision as a number
  // without a regular expression (two per member cost more than the rest of the decision): anything
  // but the three words is read as one, and what does not read fails the statement, and the group
  // is settled one append at a time (append_members refuses it). `single`: every member one event
  // (the usual group), its ordinal the member's own, with no window and no series to join.
  const decided = (
    single: boolean,
  ) => `SELECT m.*, coalesce(m.x = 'any' OR (m.x = 'no_stream' AND m.cur IS NULL)
               OR (m.x = 'stream_exists' AND m.cur IS NOT NULL) OR m.cur = m.want, false) AS ok
        FROM (SELECT m.i::integer AS i, m.s, m.x, m.n, m.want,
                     ${single ? 'm.i::integer' : '(sum(m.n) OVER (ORDER BY m.i))::integer'} AS fin,
                     (SELECT max(e.revision) FROM ${schema}.events e WHERE e.stream = m.s
                         AND e.revision >= coalesce(m.want, 0)) AS cur
                FROM (SELECT m.*, CASE WHEN m.x IN ('any', 'no_stream', 'stream_exists') THEN NULL
                                       ELSE m.x::bigint END AS want
                        FROM unnest(p_streams, p_expected, p_counts) WITH ORDINALITY AS m(s, x, n, i)) AS m${
                          single ? '\n              OFFSET 0' : ''
                        }) AS m`;
  const columns = '(position, id, stream, revision, type, recorded_at, correlation_id, causation_id, data)';
  return `  -- Version 6: set-wise when each stream is in the group once and every member has events.
  IF v_keys = v_apps AND 0 <> ALL (p_counts) AND cardinality(p_ids) < ${POSITIONS_PER_TRANSACTION} THEN
    -- Member m's events are the group's ordinals fin - n + 1 .. fin: positions base + ordinal,
    -- revisions on from the stream's. Only the members written are answered here.
    IF cardinality(p_ids) = v_apps THEN
      -- Each written row answers its member: position base + i, its revision the next one.
      RETURN QUERY WITH w AS (
        INSERT INTO ${schema}.events AS e ${columns}
        SELECT v_base + d.i, p_ids[d.i], d.s, coalesce(d.cur, -1) + 1, p_types[d.i], now(),
               coalesce(p_correlation[d.i], p_ids[d.i]), p_causation[d.i], p_data[d.i]
          FROM (${decided(true)}) AS d
         WHERE d.ok
        RETURNING e.position, e.revision
      )
      SELECT (w.position - v_base)::integer, NULL::text, NULL::text, w.revision, w.position FROM w;
    ELSE
      RETURN QUERY WITH d AS (
        ${decided(false)}
      ), w AS (
        INSERT INTO ${schema}.events ${columns}
        SELECT v_base + g.o, p_ids[g.o], d.s, coalesce(d.cur, -1) + g.o - (d.fin - d.n), p_types[g.o], now(),
               coalesce(p_correlation[g.o], p_ids[g.o]), p_causation[g.o], p_data[g.o]
          FROM d, generate_series(d.fin - d.n + 1, d.fin) AS g(o)
         WHERE d.ok
      )
      SELECT d.i, NULL::text, NULL::text, coalesce(d.cur, -1) + d.n, v_base + d.fin FROM d WHERE d.ok;
    END IF;
    GET DIAGNOSTICS v_written = ROW_COUNT;
    IF v_written < v_apps THEN
      -- The members refused, each decided again alone, ids first. They write nothing: a retry is
      -- answered from what is stored, and a refusal stands (its stream's lock is held).
      RETURN QUERY SELECT d.i, r.code, r.detail, r.next_revision, r.head
        FROM (${decided(false)}) AS d,
             LATERAL ${schema}.append_members(v_base, ARRAY[d.s], ARRAY[d.x], ARRAY[d.n],
               p_ids[d.fin - d.n + 1 : d.fin], p_types[d.fin - d.n + 1 : d.fin],
               p_correlation[d.fin - d.n + 1 : d.fin], p_causation[d.fin - d.n + 1 : d.fin],
               p_data[d.fin - d.n + 1 : d.fin]) AS r
       WHERE NOT d.ok${
         onlyUnwritten
           ? `
         AND NOT EXISTS (SELECT 1 FROM ${schema}.events e WHERE e.position = v_base + d.fin)`
           : ''
       };
    END IF;
    RETURN;
  END IF;
`;
}

/**
 * Version 8's group of appends that each expect a revision (`p_expected` >= 0) or no stream (-1)
 * and carry one event: see that migration. The events' data come as one JSON array (each element
 * stored as its text was sent): the driver spells a json[] parameter out with every quote of every
 * payload escaped, and the server unescapes them again. Answers one row, idx 0, whose head is the group's
 * position base: member i, written, sits at base + i with revision expected + 1. Members not written
 * answer rows of their own (idx i), from append_members.
 */
function unlockedGroup({ schema, guard }: Pick<SchemaNames, 'schema' | 'guard'>, version: 8 | 9): string {
  const v9 = version >= 9;
  return `${v9 ? 'CREATE OR REPLACE FUNCTION' : 'CREATE FUNCTION'} ${schema}.append_group_unlocked(
  p_streams text[], p_expected bigint[], p_sync boolean,
  p_ids text[], p_types text[], p_correlation text[], p_causation text[], p_data json
) RETURNS TABLE (idx integer, code text, detail text, next_revision bigint, head bigint)
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $fn$
DECLARE
  v_apps integer := coalesce(cardinality(p_streams), 0);
  v_base bigint;${v9 ? '' : '\n  v_started timestamptz;'}
  v_setting text;
  v_written bigint;
  v_data json[];
BEGIN
  IF v_apps = 0 THEN
    RETURN;
  END IF;
  IF cardinality(p_ids) <> v_apps OR cardinality(p_expected) <> v_apps OR json_array_length(p_data) <> v_apps THEN
    RAISE EXCEPTION 'append_group_unlocked takes one event per member' USING ERRCODE = 'invalid_parameter_value';
  END IF;${
    v9
      ? `
  -- Members not written are placed after the group's, up to base + 2 * members: kept within the
  -- transaction's ordinals (up to 65,535), as append_group keeps its groups.
  IF 2 * v_apps >= ${POSITIONS_PER_TRANSACTION} THEN
    RAISE EXCEPTION 'an unlocked group holds at most % appends', (${POSITIONS_PER_TRANSACTION} - 1) / 2 USING ERRCODE = 'ES003';
  END IF;`
      : ''
  }
  IF NOT p_sync THEN
    v_setting := set_config('synchronous_commit', 'off', true);
  END IF;
${
  v9
    ? `  SELECT b.base INTO v_base FROM ${schema}.position_base b;
${baseGuard(schema, guard)}`
    : `  SELECT b.base, b.started INTO v_base, v_started FROM ${schema}.position_base b;
  -- The base moves once per server start, as in append_group.
${startBaseMove(schema)}`
}
  v_base := pg_current_xact_id()::text::bigint * ${POSITIONS_PER_TRANSACTION} + v_base;
  -- A member is written when its stream's last revision, read from the expected one up (one index
  -- entry when it holds; see headRevision), is the expected one, or none for no stream (-1).
  INSERT INTO ${schema}.events
    (position, id, stream, revision, type, recorded_at, correlation_id, causation_id, data)
  SELECT v_base + m.i, m.id, m.s, m.x + 1, m.t, now(), coalesce(m.correlation, m.id), m.causation, m.d
    FROM ROWS FROM (unnest(p_streams), unnest(p_expected), unnest(p_ids), unnest(p_types),
                    unnest(p_correlation), unnest(p_causation), json_array_elements(p_data))
      WITH ORDINALITY AS m(s, x, id, t, correlation, causation, d, i)
   WHERE m.x >= -1
     AND coalesce((SELECT max(e.revision) FROM ${schema}.events e
                    WHERE e.stream = m.s AND e.revision >= greatest(m.x, 0)), -1) = m.x;
  GET DIAGNOSTICS v_written = ROW_COUNT;
  RETURN QUERY SELECT 0, NULL::text, NULL::text, NULL::bigint, v_base;
  IF v_written < v_apps THEN
    SELECT array_agg(d.value ORDER BY d.i) INTO v_data FROM json_array_elements(p_data) WITH ORDINALITY AS d(value, i);
    -- The members not written, each decided again alone, ids first, positions after the group's.
    RETURN QUERY SELECT m.i::integer, r.code, r.detail, r.next_revision, r.head
      FROM unnest(p_streams, p_expected) WITH ORDINALITY AS m(s, x, i),
           LATERAL ${schema}.append_members(v_base + v_apps + m.i - 1, ARRAY[m.s],
             ARRAY[CASE WHEN m.x = -1 THEN 'no_stream' ELSE m.x::text END], ARRAY[1],
             p_ids[m.i:m.i], p_types[m.i:m.i], p_correlation[m.i:m.i], p_causation[m.i:m.i],
             v_data[m.i:m.i]) AS r
     WHERE NOT EXISTS (SELECT 1 FROM ${schema}.events e WHERE e.position = v_base + m.i);
  END IF;
END
$fn$;
`;
}

/**
 * Stops a migration unless `events_id_ordered`, where it exists (and with `required`, it must), is
 * the index version 4 builds: valid, unique, whole (not partial), on the id's version digit and then
 * the id. Anything else under that name (an operator's build still running, or failed, or of another
 * shape) would let version 5 drop the only index that keeps ids unique.
 */
function checkOrderedIdIndex(schema: string, required: boolean): string {
  const missing = required
    ? `  IF NOT FOUND THEN
    RAISE EXCEPTION 'index ${schema}.events_id_ordered is missing: the plain unique index on id stays';
  END IF;
`
    : '';
  return `DO $check$
DECLARE
  v_index pg_index;
BEGIN
  SELECT i.* INTO v_index FROM pg_index i WHERE i.indexrelid = to_regclass('${schema}.events_id_ordered');
${missing}  IF FOUND AND NOT (v_index.indisvalid AND v_index.indisunique AND v_index.indpred IS NULL
      AND v_index.indnatts = 2
      AND pg_get_indexdef(v_index.indexrelid, 1, true) = '${versionDigit('id')}'
      AND pg_get_indexdef(v_index.indexrelid, 2, true) = 'id') THEN
    RAISE EXCEPTION 'index ${schema}.events_id_ordered is not the one this migration builds: %',
        pg_get_indexdef(v_index.indexrelid)
      USING HINT = CASE WHEN v_index.indisvalid THEN 'Drop it (DROP INDEX CONCURRENTLY) and start again.'
        ELSE 'A CREATE INDEX CONCURRENTLY is still building it or failed: wait for it to finish, or drop it (DROP INDEX CONCURRENTLY), and start again.' END;
  END IF;
END
$check$;`;
}

export const MIGRATIONS: Migration[] = [
  {
    version: 1,
    name: 'events, projections and the append function',
    sql: ({ schema, channel, lockKeys }) => `
CREATE TABLE ${schema}.events (
  position       bigint PRIMARY KEY,
  id             text NOT NULL UNIQUE,
  stream         text NOT NULL,
  revision       bigint NOT NULL,
  type           text NOT NULL,
  recorded_at    timestamptz NOT NULL,
  correlation_id text NOT NULL,
  causation_id   text,
  -- json, not jsonb: the payload comes back with the key order and numbers it went in with.
  data           json NOT NULL,
  UNIQUE (stream, revision)
);

CREATE TABLE ${schema}.projections (
  name       text PRIMARY KEY,
  version    integer NOT NULL,
  checkpoint bigint NOT NULL,
  state      json NOT NULL
);

-- One round trip per append. Appends are serialised by a transaction-scoped advisory lock held
-- until commit: positions are handed out in commit order, so a reader that has seen position N
-- can never later find a committed event below N (no gaps for catch-up subscriptions).
-- Errors: SQLSTATE ES001 (wrong expected revision, DETAIL = actual revision or empty) and
-- ES002 (idempotency conflict, DETAIL = the event id).
CREATE FUNCTION ${schema}.append_events(
  p_stream text, p_expected text, p_ids text[], p_types text[],
  p_correlation text[], p_causation text[], p_data json[]
) RETURNS TABLE (next_revision bigint, head bigint)
LANGUAGE plpgsql AS $fn$
DECLARE
  n integer := coalesce(cardinality(p_ids), 0);
  v_current bigint;
  v_head bigint;
  v_first record;
  v_row record;
  v_dup text;
BEGIN
  PERFORM pg_advisory_xact_lock(${lockKeys[0]}, ${lockKeys[1]});

  IF n > 0 THEN
    SELECT e.stream, e.revision, e.position INTO v_first FROM ${schema}.events e WHERE e.id = p_ids[1];
    IF FOUND THEN
      -- A retry: idempotent only when every id is the same consecutive run of this stream.
      IF v_first.stream <> p_stream THEN
        RAISE EXCEPTION 'idempotency conflict' USING ERRCODE = 'ES002', DETAIL = p_ids[1];
      END IF;
      v_row := v_first;
      FOR i IN 2..n LOOP
        SELECT e.stream, e.revision, e.position INTO v_row FROM ${schema}.events e WHERE e.id = p_ids[i];
        IF NOT FOUND OR v_row.stream <> p_stream OR v_row.revision <> v_first.revision + i - 1 THEN
          RAISE EXCEPTION 'idempotency conflict' USING ERRCODE = 'ES002', DETAIL = p_ids[i];
        END IF;
      END LOOP;
      RETURN QUERY SELECT v_row.revision, v_row.position;
      RETURN;
    END IF;
  END IF;

  SELECT max(e.revision) INTO v_current FROM ${schema}.events e WHERE e.stream = p_stream;
  IF NOT coalesce(
    p_expected = 'any'
    OR (p_expected = 'no_stream' AND v_current IS NULL)
    OR (p_expected = 'stream_exists' AND v_current IS NOT NULL)
    OR (p_expected ~ '^-?[0-9]+$' AND v_current = p_expected::bigint),
    false
  ) THEN
    RAISE EXCEPTION 'wrong expected revision' USING ERRCODE = 'ES001', DETAIL = coalesce(v_current::text, '');
  END IF;

  SELECT coalesce(max(e.position), 0) INTO v_head FROM ${schema}.events e;
  IF n = 0 THEN
    RETURN QUERY SELECT coalesce(v_current, -1), v_head;
    RETURN;
  END IF;

  -- Ids already stored (or repeated in the batch) trip the unique index; looking them up first
  -- would cost a scan per append, so the rare conflict is sorted out after the fact.
  BEGIN
    INSERT INTO ${schema}.events
      (position, id, stream, revision, type, recorded_at, correlation_id, causation_id, data)
    SELECT v_head + u.ord, u.id, p_stream, coalesce(v_current, -1) + u.ord, u.type, now(),
           coalesce(u.correlation, u.id), u.causation, u.data
    FROM unnest(p_ids, p_types, p_correlation, p_causation, p_data)
      WITH ORDINALITY AS u(id, type, correlation, causation, data, ord);
  EXCEPTION WHEN unique_violation THEN
    SELECT u.id INTO v_dup FROM unnest(p_ids) AS u(id) GROUP BY u.id HAVING count(*) > 1 LIMIT 1;
    IF v_dup IS NULL THEN
      FOR i IN 1..n LOOP
        PERFORM 1 FROM ${schema}.events e WHERE e.id = p_ids[i];
        IF FOUND THEN
          v_dup := p_ids[i];
          EXIT;
        END IF;
      END LOOP;
    END IF;
    IF v_dup IS NULL THEN
      RAISE;
    END IF;
    RAISE EXCEPTION 'idempotency conflict' USING ERRCODE = 'ES002', DETAIL = v_dup;
  END;

  PERFORM pg_notify('${channel}', (v_head + n)::text);
  RETURN QUERY SELECT coalesce(v_current, -1) + n, v_head + n;
END
$fn$;
`,
  },
  {
    version: 2,
    name: 'parallel appends: positions from the writing transaction, readers gated by the oldest in flight',
    sql: ({ schema, lockKeys }) => `
-- Positions from here on are (writing transaction's id) * ${POSITIONS_PER_TRANSACTION} + base + ordinal.
-- Writers no longer queue on one lock held through commit; a reader reads only positions below the
-- oldest transaction still in flight (readableBelow), so an event that commits late can never
-- appear below a position a reader has already passed. Positions stay increasing, no longer
-- consecutive. \`base\` puts every new position above the ones version 1 handed out.
-- \`started\`: the server start the base was last checked against (see append_group).
CREATE TABLE ${schema}.position_base (base bigint NOT NULL, started timestamptz NOT NULL);
INSERT INTO ${schema}.position_base
  SELECT greatest(0, coalesce(max(position), 0) + 1 - pg_current_xact_id()::text::bigint * ${POSITIONS_PER_TRANSACTION}),
         pg_postmaster_start_time()
  FROM ${schema}.events;

-- Version 1's serialised append would hand out positions below ones readers have passed: a process
-- of the old version still running after this migration fails its appends instead.
DROP FUNCTION ${schema}.append_events(text, text, text[], text[], text[], text[], json[]);

-- A group of appends (several streams, one round trip, one commit). Each append is decided on its
-- own and answers its own row: code NULL (written or an idempotent retry), ES001 (wrong expected
-- revision, detail = actual revision or empty) or ES002 (idempotency conflict, detail = the id).
-- Writers of one stream queue on that stream's transaction-scoped advisory lock (taken in key
-- order, so two groups cannot deadlock); writers of different streams do not wait for each other.
CREATE FUNCTION ${schema}.append_group(
  p_streams text[], p_expected text[], p_counts integer[], p_sync boolean,
  p_ids text[], p_types text[], p_correlation text[], p_causation text[], p_data json[]
) RETURNS TABLE (idx integer, code text, detail text, next_revision bigint, head bigint)
LANGUAGE plpgsql AS $fn$
DECLARE
  v_key integer;
  v_base bigint;
  v_ord integer := 0;
  v_off integer := 0;
  v_n integer;
  v_stream text;
  v_expected text;
  v_current bigint;
  v_first record;
  v_row record;
  v_bad text;
  v_last bigint := 0;
BEGIN
  IF NOT p_sync THEN
    PERFORM set_config('synchronous_commit', 'off', true);
  END IF;
  FOR v_key IN SELECT DISTINCT hashtext(s) FROM unnest(p_streams) AS s ORDER BY 1 LOOP
    PERFORM pg_advisory_xact_lock(${lockKeys[1]}, v_key);
  END LOOP;
  -- First append since the server (re)started: transactions committed asynchronously and lost in
  -- a crash may see their ids handed out again, below positions readers have already passed, and a
  -- restored copy of the log may restart ids lower still. The base moves past both, once per start.
  IF (SELECT b.started FROM ${schema}.position_base b) IS DISTINCT FROM pg_postmaster_start_time() THEN
${restartedBase(schema, '    ')}
     WHERE b.started IS DISTINCT FROM pg_postmaster_start_time();
  END IF;
  SELECT pg_current_xact_id()::text::bigint * ${POSITIONS_PER_TRANSACTION} + b.base INTO v_base
    FROM ${schema}.position_base b;

  FOR i IN 1..coalesce(cardinality(p_streams), 0) LOOP
    v_stream := p_streams[i];
    v_expected := p_expected[i];
    v_n := p_counts[i];
    v_bad := NULL;
    IF v_n > 0 THEN
      SELECT e.stream, e.revision, e.position INTO v_first FROM ${schema}.events e WHERE e.id = p_ids[v_off + 1];
      IF FOUND THEN
        -- A retry: idempotent only when every id is the same consecutive run of this stream.
        IF v_first.stream <> v_stream THEN
          v_bad := p_ids[v_off + 1];
        ELSE
          v_row := v_first;
          FOR j IN 2..v_n LOOP
            SELECT e.stream, e.revision, e.position INTO v_row FROM ${schema}.events e WHERE e.id = p_ids[v_off + j];
            IF NOT FOUND OR v_row.stream <> v_stream OR v_row.revision <> v_first.revision + j - 1 THEN
              v_bad := p_ids[v_off + j];
              EXIT;
            END IF;
          END LOOP;
        END IF;
        IF v_bad IS NULL THEN
          RETURN QUERY SELECT i, NULL::text, NULL::text, v_row.revision, v_row.position;
        ELSE
          RETURN QUERY SELECT i, 'ES002'::text, v_bad, NULL::bigint, NULL::bigint;
        END IF;
        v_off := v_off + v_n;
        CONTINUE;
      END IF;
    END IF;

    SELECT max(e.revision) INTO v_current FROM ${schema}.events e WHERE e.stream = v_stream;
    IF NOT coalesce(
      v_expected = 'any'
      OR (v_expected = 'no_stream' AND v_current IS NULL)
      OR (v_expected = 'stream_exists' AND v_current IS NOT NULL)
      OR (v_expected ~ '^-?[0-9]+$' AND v_current = v_expected::bigint),
      false
    ) THEN
      RETURN QUERY SELECT i, 'ES001'::text, coalesce(v_current::text, ''), NULL::bigint, NULL::bigint;
    ELSIF v_n = 0 THEN
      RETURN QUERY SELECT i, NULL::text, NULL::text, coalesce(v_current, -1),
        (SELECT coalesce(max(e.position), 0) FROM ${schema}.events e);
    ELSE
      IF v_ord + v_n >= ${POSITIONS_PER_TRANSACTION} THEN
        RAISE EXCEPTION 'a group holds at most % events', ${POSITIONS_PER_TRANSACTION} - 1 USING ERRCODE = 'ES003';
      END IF;
      -- Ids stored before under another stream trip the unique index and fail the whole group;
      -- the adapter then appends each member alone and names the id (see postgres.ts).
      INSERT INTO ${schema}.events
        (position, id, stream, revision, type, recorded_at, correlation_id, causation_id, data)
      SELECT v_base + v_ord + u.ord, u.id, v_stream, coalesce(v_current, -1) + u.ord, u.type, now(),
             coalesce(u.correlation, u.id), u.causation, u.data
      FROM unnest(p_ids[v_off + 1 : v_off + v_n], p_types[v_off + 1 : v_off + v_n],
                  p_correlation[v_off + 1 : v_off + v_n], p_causation[v_off + 1 : v_off + v_n],
                  p_data[v_off + 1 : v_off + v_n])
        WITH ORDINALITY AS u(id, type, correlation, causation, data, ord);
      v_ord := v_ord + v_n;
      v_last := v_base + v_ord;
      RETURN QUERY SELECT i, NULL::text, NULL::text, coalesce(v_current, -1) + v_n, v_last;
    END IF;
    v_off := v_off + v_n;
  END LOOP;
  -- No NOTIFY here: a notifying transaction holds the server's one notify lock through its
  -- commit, which would queue every writer again. The adapter notifies after the commit.
END
$fn$;
`,
  },
  {
    version: 3,
    name: 'append_group decided set-wise: one look-up per group for ids, one for revisions, one insert',
    sql: (names) => `
-- Version 2 decided a group member by member: an id look-up, a revision look-up, an insert and a
-- result row for each, four statements (plus a lock statement per stream) at 10-20 µs of executor
-- set-up each, most of the server's CPU per append. From here a group is decided with one look-up
-- of all its ids, one of its streams' revisions and one insert of all its rows; the members are
-- decided in between in memory, in order, as before. A group holding an id that is stored already
-- (a retry, or a reuse) is decided member by member as in version 2 (append_members).
${appendFunctions(names, plainIdMatch, 'CREATE FUNCTION')}`,
  },
  {
    version: 4,
    name: 'the id index keyed by version digit, then id: time-ordered ids after the others',
    sql: (names) => `
-- The ids the service makes are time-ordered (UUID version 7, contracts/event-id.ts), and the unique
-- index on id held them inside the range of the random and content-derived ones, where each new
-- one lands in a full leaf that splits in half: 106 bytes of index per such id against 79 for random
-- ones (bench postgres (g)). Keyed first by their version digit, they come after the random (4) and
-- content-derived (5) ids and fill the last leaf, as the LMDB store's prefix makes them do there.
-- Building the index reads the whole log while appends wait (reads go on), until the migration
-- commits. On a large log an operator builds it beforehand, CONCURRENTLY, under this name
-- (deploy/README.md): it is kept when it is the index this migration would build, and anything else
-- under the name stops the start (a build still running or failed shows as not valid), since version
-- 5 drops the plain unique index on the strength of this one.
${checkOrderedIdIndex(names.schema, false)}
CREATE UNIQUE INDEX IF NOT EXISTS events_id_ordered ON ${names.schema}.events (${versionDigit('id')}, id);
${appendFunctions(names, orderedIdMatch, 'CREATE OR REPLACE FUNCTION')}`,
  },
  {
    version: 5,
    name: 'the plain unique index on id dropped',
    sql: ({ schema }) => `
-- Apart from version 4: dropping the plain index takes the table to itself, and in version 4's
-- transaction, after the build, that deadlocked with a version-3 process that had read the table and
-- was waiting to insert (the migration lost, and the new process failed to start). Alone, it waits
-- for the transactions in flight on the table (a long one: a dump, a session idle in a transaction).
-- Each try waits at most 200 ms for the lock, so the reads and appends queued behind it wait no
-- longer, and the pauses between tries grow to 2 s; after about 5 minutes the start fails.
${checkOrderedIdIndex(schema, true)}
DO $do$
BEGIN
  PERFORM set_config('lock_timeout', '200ms', true);
  FOR attempt IN 1..150 LOOP
    BEGIN
      ALTER TABLE ${schema}.events DROP CONSTRAINT IF EXISTS events_id_key;
      RETURN;
    EXCEPTION WHEN lock_not_available THEN
      PERFORM pg_sleep(least(0.2 * attempt, 2));
    END;
  END LOOP;
  RAISE EXCEPTION 'the events table stayed locked through 150 tries to drop its plain id index'
    USING ERRCODE = 'lock_not_available',
          HINT = 'Find the transaction holding it: SELECT pid, xact_start, query FROM pg_stat_activity WHERE xact_start IS NOT NULL ORDER BY xact_start.';
END
$do$;
`,
  },
  {
    version: 6,
    name: 'append_group: a group of distinct streams decided, written and answered in one statement',
    sql: (names) => `
-- Version 5's group cost the server 2-3x a bare INSERT of the same rows (bench postgres (e)): an id
-- look-up per event, a revision look-up per stream that compared every entry of the stream on its
-- index page, and a decision loop. From here a group whose streams are each in it once and whose
-- members all have events is decided, written and answered in one statement after the one that
-- takes its locks: revisions read from the expected ones up, ids looked up only when the insert
-- finds one stored (the statement fails, and the adapter settles the group one append at a time),
-- a refused member decided again alone, ids first. Anything else is decided member by member as
-- before. The arguments, answers and errors are version 5's: processes of either version share
-- the log, and a version-5 process started after this migration calls these functions.
${appendFunctions(names, orderedIdMatch, 'CREATE OR REPLACE FUNCTION', 6)}`,
  },
  {
    version: 7,
    name: 'append_group: a refused member decided again alone, the written ones not',
    sql: (names) => `
-- Version 6 decided the group a second time after its insert to find the refused members, and a
-- member written by that insert now reads its own new revision, so one with a numeric expectation
-- read as refused and was decided again by append_members (answered from its stored ids as a
-- retry: the same answer, read twice). From here a member whose last event sits at its position
-- (v_base + its last ordinal; a refused member writes nothing there) is left out of that pass.
${appendFunctions(names, orderedIdMatch, 'CREATE OR REPLACE FUNCTION', 7)}`,
  },
  {
    version: 8,
    name: 'append_group_unlocked: appends expecting a revision settled by the (stream, revision) index, without stream locks',
    sql: (names) => `
-- The stream locks cost a group's server a statement and a lock per append (bench postgres (e)), and
-- an append that expects a revision, or no stream, needs none: it writes the revision after the one
-- it expects, and the unique index on (stream, revision) lets only one writer of that revision
-- commit. A group of such appends, one event each (what commands append), is decided and written by
-- one statement of this function, and answered with one row; the appends expecting anything else go
-- through append_group, under the locks, as before. A member whose stream is not at the revision it
-- expects is decided again alone, ids first (a retry is answered as one). Two writers of one
-- revision in flight at once: the second's insert waits for the first to end, and fails its whole
-- statement if it committed; the adapter then appends that group's members one at a time through
-- append_group, where the loser is refused. append_group's own insert may meet a revision written
-- here the same way: the adapter from this version retries that append alone, where a process of
-- version 7 reports it as an idempotency conflict (only while both versions write one stream).
${unlockedGroup(names, 8)}`,
  },
  {
    version: 9,
    name: 'the position base moves after a crash restart too: an unlogged marker, checked once per session',
    sql: (names) => `
-- Up to version 8 the base moved when pg_postmaster_start_time() changed, and a crash restart (one
-- backend killed, the others ended and the WAL replayed by the same postmaster) keeps it: ids of
-- asynchronous commits lost in the crash were handed out again, below positions readers had passed.
-- From here the first append of each session calls position_guard, which moves the base when the
-- unlogged marker lacks the current server start: crash recovery empties unlogged tables, and a
-- clean restart changes the start. Later appends of the session read a session setting instead of
-- position_base.started. The arguments and answers of the append functions stay version 8's.
${positionGuard(names.schema, names.guard)}
-- The upgrade moves the base, unless version 8 moved it at this server start, and writes the
-- marker: moved again by the first append of version 9, the base would jump past the positions of
-- version-8 appends still in flight, and readers with it. The update waits for a version-8 append
-- that moved the base and is not yet committed (read without the row lock, that move went unseen)
-- and then leaves the base as it moved it. (A crash restart before this upgrade stays unseen, as it
-- was by version 8.)
${restartedBase(names.schema, '')}
 WHERE b.started IS DISTINCT FROM pg_postmaster_start_time();
INSERT INTO ${names.schema}.position_marker (started) VALUES (pg_postmaster_start_time());
${appendFunctions(names, orderedIdMatch, 'CREATE OR REPLACE FUNCTION', 9)}
${unlockedGroup(names, 9)}`,
  },
  {
    version: 10,
    name: 'the event types of the catalog the log holds, so an older build refuses a newer log',
    sql: ({ schema }) => `
-- Each catalog type is recorded by the first process that appends one (before that append, once
-- per process and type: see PostgresEventStore.append). A build meeting a recorded name outside
-- its catalog refuses the log at open. Events appended before this version are of types every
-- build with this version knows, so nothing is backfilled.
CREATE TABLE ${schema}.event_types (
  name text PRIMARY KEY,
  recorded_at timestamptz NOT NULL DEFAULT now()
);`,
  },
];

/**
 * Whether any of the ids `$1` (text[]) is stored, as the newest version's index finds it: the id of
 * one that is, or no row.
 */
export const storedIdQuery = (schema: string): string =>
  `SELECT u.id FROM unnest($1::text[]) AS u(id) WHERE EXISTS (SELECT 1 FROM ${schema}.events e WHERE ${orderedIdMatch('u.id')}) LIMIT 1`;
