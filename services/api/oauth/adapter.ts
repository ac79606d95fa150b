import type { Adapter, AdapterPayload } from 'oidc-provider';
import type { OAuthStore } from './store.ts';

/** Models whose records belong to a grant: revoking the grant deletes them. */
const GRANTABLE = new Set([
  'AccessToken',
  'AuthorizationCode',
  'RefreshToken',
  'DeviceCode',
  'BackchannelAuthenticationRequest',
]);

const grantSet = (grantId: string) => `grant:${grantId}`;
const sessionUid = (uid: string) => `sessionUid:${uid}`;
const userCode = (code: string) => `userCode:${code}`;

/**
 * The oidc-provider storage adapter over an OAuthStore: one instance per model (Client, Grant,
 * Session, AccessToken, ...), records as JSON under `<model>:<id>`, with the indexes the library
 * asks for (session by uid, tokens by grant).
 */
export function oauthAdapter(store: OAuthStore): new (model: string) => Adapter {
  return class StoreAdapter implements Adapter {
    constructor(private readonly model: string) {}

    private key(id: string): string {
      return `${this.model}:${id}`;
    }

    async upsert(id: string, payload: AdapterPayload, expiresIn: number): Promise<void> {
      const ttl = typeof expiresIn === 'number' && expiresIn > 0 ? expiresIn : undefined;
      const key = this.key(id);
      await store.put(key, JSON.stringify(payload), ttl);
      if (GRANTABLE.has(this.model) && payload.grantId)
        await store.addMember(grantSet(payload.grantId), key, ttl);
      if (this.model === 'Session' && payload.uid) await store.put(sessionUid(payload.uid), id, ttl);
      if (payload.userCode) await store.put(userCode(payload.userCode), id, ttl);
    }

    async find(id: string): Promise<AdapterPayload | undefined> {
      const stored = await store.get(this.key(id));
      if (stored === undefined) return undefined;
      const payload = JSON.parse(stored.value) as AdapterPayload;
      return stored.consumedAt === null ? payload : { ...payload, consumed: stored.consumedAt };
    }

    async findByUid(uid: string): Promise<AdapterPayload | undefined> {
      const id = await store.get(sessionUid(uid));
      return id === undefined ? undefined : this.find(id.value);
    }

    async findByUserCode(code: string): Promise<AdapterPayload | undefined> {
      const id = await store.get(userCode(code));
      return id === undefined ? undefined : this.find(id.value);
    }

    async consume(id: string): Promise<void> {
      await store.consume(this.key(id), Math.floor(Date.now() / 1_000));
    }

    async destroy(id: string): Promise<void> {
      const payload = await this.find(id);
      await store.del([this.key(id)]);
      if (payload?.grantId && GRANTABLE.has(this.model))
        await store.removeMember(grantSet(payload.grantId), this.key(id));
    }

    async revokeByGrantId(grantId: string): Promise<void> {
      const members = await store.members(grantSet(grantId));
      await store.del([...members, grantSet(grantId)]);
    }
  };
}
