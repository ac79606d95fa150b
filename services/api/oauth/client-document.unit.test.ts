import { describe, expect, it } from 'vitest';
import { clientDocumentFetchAllowed } from './client-document.ts';

describe('which client ID metadata documents the server fetches', () => {
  const resolver = (table: Record<string, string[]>) => async (host: string) => table[host] ?? [];

  it('fetches from public addresses only', async () => {
    const resolve = resolver({
      'host.example': ['93.184.216.34'],
      'inside.example': ['10.0.0.7'],
      'mixed.example': ['93.184.216.34', '127.0.0.1'],
      'v6.example': ['2606:2800:220:1:248:1893:25c8:1946'],
    });
    expect(await clientDocumentFetchAllowed('https://host.example/client.json', resolve)).toBe(true);
    expect(await clientDocumentFetchAllowed('https://v6.example/client.json', resolve)).toBe(true);
    for (const refused of [
      'https://inside.example/client.json',
      'https://mixed.example/client.json',
      'https://unknown.example/client.json',
      'https://127.0.0.1/client.json',
      'https://[::1]/client.json',
      'https://169.254.169.254/latest',
      'https://[::ffff:10.0.0.1]/c.json',
      'not a url',
    ]) {
      expect(await clientDocumentFetchAllowed(refused, resolve), refused).toBe(false);
    }
  });
});
