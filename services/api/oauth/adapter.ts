import { hash } from 'node:crypto';
import { type Adapter, type AdapterPayload, errors, Provider } from 'oidc-provider';
import type { OAuthStore } from './store.ts';

/**
 * Models whose id is the bearer value itself (opaque access and refresh tokens, codes, the
 * registration access token) or what a cookie carries to resume a person's sign-in (the session
 * id, an interaction's uid): a record is kept under the SHA-256 of its id and without its `jti`
 * (which is the id) nor any other copy of it (an interaction's `returnTo` names its uid), so the
 * store (Redis, an RDB snapshot or AOF of it) holds nothing a caller could present, as an API key
 * is kept by its hash only; `find` is given the value and puts it back. A record saved before
 * this (under the id itself) is still found and ended, so a host signed in then stays signed in
 * until its token ends.
 */
const SECRET_IDS = new Set([
  'AccessToken',
  'AuthorizationCode',
  'RefreshToken',
  'ClientCredentials',
  'RegistrationAccessToken',
  'DeviceCode',
  'BackchannelAuthenticationRequest',
  'Session',
  'Interaction',
]);

/**
 * What stands for the record's own id inside a kept record. JSON.stringify writes U+0000 as an
 * escape, so no serialized value can hold it: put back on read, it only ever stood for the id.
 */
const ID_MARK = '\u0000';

/**
 * A record of a SECRET_IDS model as kept: no `jti`, its id nowhere in it; for an interaction, not
 * the id of the session it was started in either (`session.cookie`, which the library writes and
 * never reads: the person's session is found by its cookie, or by `session.uid`).
 */
function keptRecord(model: string, id: string, payload: AdapterPayload): string {
  const { jti: _value, ...kept } = payload;
  if (model === 'Interaction' && kept.session !== undefined) {
    const { cookie: _session, ...session } = kept.session as Record<string, unknown>;
    kept.session = session as AdapterPayload['session'];
  }
  return JSON.stringify(kept).replaceAll(id, ID_MARK);
}

/** Models whose records belong to a grant: revoking the grant deletes them. */
const GRANTABLE = new Set([
  'AccessToken',
  'AuthorizationCode',
  'RefreshToken',
  'DeviceCode',
  'BackchannelAuthenticationRequest',
]);

/** Models whose record, saved for a client, means the client was used: it signed someone in. */
const USES_CLIENT = new Set(['Grant', 'AuthorizationCode', 'AccessToken', 'RefreshToken']);

/** How long registered clients are kept (POST /oauth/register is open to anyone). */
export interface ClientLifetime {
  /** A client never used for a grant is deleted this long after its registration. */
  unusedTtlS: number;
  /** Clients registered and not used yet kept at most: one more deletes the oldest of them. */
  maxUnused: number;
  /**
   * How long a sign-in started with a client (an Interaction saved for it) keeps that client from
   * being pushed out by newer registrations (the Interaction's lifetime, OAUTH_INTERACTION_TTL_S).
   */
  signInS: number;
}

/**
 * A day to complete a sign-in after registering; 5,000 clients waiting for one, and up to 5,000
 * more with a sign-in under way (spared, and the one just registered is never pushed out): each
 * at most the 8 KB of provider.ts CLIENT_METADATA_LIMITS, ~80 MB in the store at worst, where
 * registrations at the rate limit without either bound kept ~15 MB a minute for good.
 */
export const DEFAULT_CLIENT_LIFETIME: ClientLifetime = { unusedTtlS: 86_400, maxUnused: 5_000, signInS: 600 };

/**
 * How long a refresh token, once rotated, may be presented again and still refresh (Okta's
 * default grace period for rotation, 30 s). A host whose calls meet an expired access token
 * together refreshes once per call with the same refresh token (the MCP SDK client does); without
 * a grace the library read the second as a stolen token replayed and revoked the grant, so every
 * token ended and the person had to sign in again, every OAUTH_ACCESS_TOKEN_TTL_S under parallel
 * calls. Within it the token refreshes again (a second rotation of the same grant); past it a
 * reuse still revokes the grant. Counted from its first use: a reuse never lengthens it.
 */
export const REFRESH_REUSE_GRACE_S = 30;

/** The ordered list of registered clients not used yet (their ids). */
const UNUSED_CLIENTS = 'clients:unused';
/**
 * The clients a sign-in was started with lately (their ids): spared when pushing out. At most
 * `maxUnused` too, so sign-ins started in bulk cannot keep more clients than that.
 */
const SIGNING_IN_CLIENTS = 'clients:signing-in';
const CLIENT = 'Client:';
const clientKey = (clientId: string) => `${CLIENT}${clientId}`;
/** The key of the client's registration access token (the library issues one per registration). */
const clientRat = (clientId: string) => `clientRat:${clientId}`;
const grantSet = (grantId: string) => `grant:${grantId}`;
const sessionUid = (uid: string) => `sessionUid:${uid}`;
const userCode = (code: string) => `userCode:${code}`;

/**
 * The oidc-provider storage adapter over an OAuthStore: one instance per model (Client, Grant,
 * Session, AccessToken, ...), records as JSON under `<model>:<id>`, with the indexes the library
 * asks for (session by uid, tokens by grant).
 *
 * Registered clients have a lifetime (the library saves them with none, and has no client expiry
 * of its own): one never used for a grant is deleted after `unusedTtlS`, or sooner when
 * `maxUnused` newer ones wait (not while a sign-in started with it is under way); one used lives
 * at least as long as each grant and token saved for it (its lifetime is lengthened to theirs),
 * so a host's refresh token never outlives its client. Its registration access token (saved by
 * the library with no lifetime) has the client's, and is deleted with it.
 */
export function oauthAdapter(
  store: OAuthStore,
  lifetime: ClientLifetime = DEFAULT_CLIENT_LIFETIME,
): new (
  model: string,
) => Adapter {
  return class StoreAdapter implements Adapter {
    private readonly secretId: boolean;

    constructor(private readonly model: string) {
      this.secretId = SECRET_IDS.has(model);
    }

    private key(id: string): string {
      return this.secretId ? `${this.model}:sha256:${hash('sha256', id, 'hex')}` : this.legacyKey(id);
    }

    /** Where a record was kept before ids that are bearer values were hashed (and still is, for the rest). */
    private legacyKey(id: string): string {
      return `${this.model}:${id}`;
    }

    /**
     * The key that holds the record of `id` and the record read there: its hashed key, else a
     * record saved before hashing (one read for a record under its hashed key, two otherwise).
     */
    private async located(
      id: string,
    ): Promise<{ key: string; stored: Awaited<ReturnType<OAuthStore['get']>> }> {
      const key = this.key(id);
      const stored = await store.get(key);
      if (!this.secretId || stored !== undefined) return { key, stored };
      const legacy = await store.get(this.legacyKey(id));
      return legacy !== undefined ? { key: this.legacyKey(id), stored: legacy } : { key, stored };
    }

    async upsert(id: string, payload: AdapterPayload, expiresIn: number): Promise<void> {
      if (this.model === 'Client') {
        await store.put(clientKey(id), JSON.stringify(payload), lifetime.unusedTtlS);
        // Deleted with their records in the script (a client just used is kept): their tokens here.
        const pushedOut = await store.admit(UNUSED_CLIENTS, id, lifetime.maxUnused, lifetime.unusedTtlS, {
          record: CLIENT,
          spare: { list: SIGNING_IN_CLIENTS, maxAgeS: lifetime.signInS },
        });
        for (const clientId of pushedOut) {
          const rat = await store.get(clientRat(clientId));
          await store.del(rat === undefined ? [clientRat(clientId)] : [rat.value, clientRat(clientId)]);
        }
        return;
      }
      const given = typeof expiresIn === 'number' && expiresIn > 0 ? expiresIn : undefined;
      const clientId = typeof payload.clientId === 'string' ? payload.clientId : undefined;
      const ttl = this.model === 'RegistrationAccessToken' ? (given ?? lifetime.unusedTtlS) : given;
      const key = this.key(id);
      await store.put(
        key,
        this.secretId ? keptRecord(this.model, id, payload) : JSON.stringify(payload),
        ttl,
      );
      if (this.model === 'RegistrationAccessToken' && clientId !== undefined) {
        await store.put(clientRat(clientId), key, ttl);
      }
      if (this.model === 'Interaction') {
        const params = payload.params as { client_id?: unknown } | undefined;
        if (typeof params?.client_id === 'string') {
          await store.admit(SIGNING_IN_CLIENTS, params.client_id, lifetime.maxUnused, lifetime.signInS);
        }
      }
      if (USES_CLIENT.has(this.model) && clientId !== undefined) {
        // Lengthened before it leaves the list: a registration on another host pushing it out
        // meanwhile then sees it used (admit keeps a record lengthened past the list's age).
        if (ttl !== undefined) {
          await store.extend(clientKey(clientId), ttl);
          const rat = await store.get(clientRat(clientId));
          if (rat !== undefined) await store.extend(rat.value, ttl);
          await store.extend(clientRat(clientId), ttl);
        }
        await store.dismiss(UNUSED_CLIENTS, clientId);
      }
      if (GRANTABLE.has(this.model) && payload.grantId)
        await store.addMember(grantSet(payload.grantId), key, ttl);
      // The uid's index names the session's key (its id's hash), not the id.
      if (this.model === 'Session' && payload.uid) await store.put(sessionUid(payload.uid), key, ttl);
      if (payload.userCode) await store.put(userCode(payload.userCode), id, ttl);
    }

    async find(id: string): Promise<AdapterPayload | undefined> {
      const { stored } = await this.located(id);
      return stored === undefined ? undefined : this.payloadOf(stored, id);
    }

    /** A kept record as the library reads it: its id put back where it is known. */
    private payloadOf(
      stored: NonNullable<Awaited<ReturnType<OAuthStore['get']>>>,
      id: string | null,
    ): AdapterPayload {
      const payload = JSON.parse(stored.value.replaceAll(ID_MARK, id ?? '')) as AdapterPayload;
      if (this.secretId && id !== null) payload.jti = id;
      if (stored.consumedAt === null) return payload;
      const reusable =
        this.model === 'RefreshToken' && Date.now() / 1_000 - stored.consumedAt < REFRESH_REUSE_GRACE_S;
      return reusable ? payload : { ...payload, consumed: stored.consumedAt };
    }

    /**
     * A session by its uid (the library checks a token's or an interaction's session with it, and
     * reads its account and grants): the index names its key; the session id is not kept, so the
     * record comes without it. An index saved before ids were hashed names the id itself.
     */
    async findByUid(uid: string): Promise<AdapterPayload | undefined> {
      const indexed = await store.get(sessionUid(uid));
      if (indexed === undefined) return undefined;
      if (!indexed.value.startsWith(`${this.model}:sha256:`)) return this.find(indexed.value);
      const stored = await store.get(indexed.value);
      return stored === undefined ? undefined : this.payloadOf(stored, null);
    }

    async findByUserCode(code: string): Promise<AdapterPayload | undefined> {
      const id = await store.get(userCode(code));
      return id === undefined ? undefined : this.find(id.value);
    }

    async consume(id: string): Promise<void> {
      // The first use is kept (the store marks it once): a refresh token used again within its
      // grace stays consumed from then.
      const { key, stored } = await this.located(id);
      const first = stored !== undefined && (await store.consume(key, Math.floor(Date.now() / 1_000)));
      if (first || this.model === 'RefreshToken') return;
      // Consumed (or its grant revoked) by another request since the library read it unconsumed:
      // two exchanges of one code at once, on any host. The library saw no reuse, so this is
      // where it is one: refused, and the grant ended as the library ends it for a code used
      // again, so the first exchange's tokens, saved before or after this, belong to a grant that
      // is gone; and said as the library says it (grant.revoked, logged by signin.ts), so that
      // the log names a grant a raced code ended as it names one a reused code ended.
      const grantId = stored === undefined ? undefined : this.payloadOf(stored, id).grantId;
      if (typeof grantId === 'string') {
        await this.revokeByGrantId(grantId);
        await new StoreAdapter('Grant').destroy(grantId);
        const ctx = Provider.ctx;
        ctx?.oidc.provider.emit('grant.revoked', ctx, grantId);
      }
      throw new errors.InvalidGrant(`${this.model} already consumed`);
    }

    async destroy(id: string): Promise<void> {
      const payload = await this.find(id);
      const keys = this.secretId ? [this.key(id), this.legacyKey(id)] : [this.key(id)];
      await store.del(keys);
      if (payload?.grantId && GRANTABLE.has(this.model))
        for (const key of keys) await store.removeMember(grantSet(payload.grantId), key);
    }

    async revokeByGrantId(grantId: string): Promise<void> {
      const members = await store.members(grantSet(grantId));
      await store.del([...members, grantSet(grantId)]);
    }
  };
}
