import { createHash } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { MIGRATIONS, schemaNames } from './postgres-schema.ts';

/**
 * A migration runs once per schema, so the SQL of one that shipped must never change: a log
 * migrated by it would differ from one migrated by the edit. Version 4 builds its functions from
 * the same template as version 3; these digests hold every version to the text it shipped with.
 */
const SHIPPED: Record<number, string> = {
  1: 'ab6f2ea6ee7032926bfbdf8a6d110fb06601cb5b318ac7a1f16060ec089c27a3',
  2: '500045e7ca51eca5f49c73a0a64a92c2c198a2060573607f63c9d7ddfd605943',
  3: '9c3cd003b8b6acfa2f88fbbb9c93b1d128e5841165925e3f93514267054781b3',
  4: 'efd09ab8f58719351cf240740be8a62f576bbb84082087005d386df52f72b8a2',
  5: 'b91e41d2cda27258e0e4cbde271ea4af6753b88563eef6a23b762e31b240f4f4',
  6: 'da38f57760bd01f01e97535d4af3539e640c56cb82521ac68eb1e96b0e366e9d',
  7: '4f4083465d6d65b144db6c82d148fabfd8b61104238a7d3b2f96557241f61bfe',
  8: '377c1a91e12792acb5702acf5a5cf3b8fed1c717fb8810785aa4a8bbece5ead7',
  9: 'cf23fb484905a2b71db54a3851d6a4369bdf658d381a8b9a227d230432e89eaa',
  10: '87a98475a78ff89cb1576aa7bf50dbd93285aeaa291125257adeeba40a8dde38',
};

describe('PostgreSQL migrations', () => {
  it('keeps the SQL of every shipped version as it shipped', () => {
    const names = schemaNames('some_schema');
    const digests = Object.fromEntries(
      MIGRATIONS.map((m) => [m.version, createHash('sha256').update(m.sql(names)).digest('hex')]),
    );
    expect(digests).toMatchObject(SHIPPED);
    expect(MIGRATIONS.map((m) => m.version)).toEqual(MIGRATIONS.map((_, i) => i + 1));
  });
});
