import { mkdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { type BrowserContext, chromium } from 'playwright-core';

/** Debian's chromium (playwright-core downloads no browser). */
export const CHROMIUM = '/usr/bin/chromium';

/**
 * Headless Chromium on a fresh profile under test-results/, with the flags this machine needs:
 * without the background-networking ones its connections to outside hosts are refused, many at once.
 */
export async function launchChromium(
  name: string,
): Promise<{ browser: BrowserContext; close(): Promise<void> }> {
  const profile = join(process.cwd(), 'test-results', `chromium-${name}-${process.pid}-${Date.now()}`);
  mkdirSync(profile, { recursive: true });
  const browser = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    headless: true,
    args: [
      '--headless',
      '--no-sandbox',
      '--disable-gpu',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
    ],
  });
  return {
    browser,
    close: async () => {
      await browser.close();
      rmSync(profile, { recursive: true, force: true });
    },
  };
}
