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
  /** Two int4 keys of the advisory lock that serialises appends within this schema. */
  lockKeys: [number, number];
}

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
  };
}

/** The advisory lock key (one bigint) under which migrations of a schema run. */
export function migrationLockKey(schema: string): bigint {
  return createHash('sha256').update(`migrate:${schema}`).digest().readBigInt64BE(0);
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
];
