import { describe, expect, it } from 'vitest';
import { type ConsentView, consentDocument, consentPage, errorPage } from './page.ts';

const VIEW: ConsentView = {
  uid: 'u1',
  clientName: 'Some host',
  clientId: 'c1',
  redirectHost: 'host.example',
  resource: 'https://api.example/mcp/signin',
};

/** The opening tag of the element with this id. */
const tag = (html: string, id: string) => new RegExp(`<[a-z]+[^>]*\\bid="${id}"[^>]*>`).exec(html)?.[0] ?? '';

describe('the OAuth sign-in pages', () => {
  it('a refused API key marks its field invalid and points it at the refusal', () => {
    const html = consentPage({
      ...VIEW,
      error: 'This is not an API key of this service.',
      errorField: 'api_key',
    });
    const input = tag(html, 'api_key');
    expect(input).toContain('aria-invalid="true"');
    expect(input).toContain('aria-describedby="consent-error"');
    expect(tag(html, 'consent-error')).toContain('role="alert"');
    // Another refusal (the wallet's) leaves the key's field alone.
    const wallet = consentPage({ ...VIEW, error: 'The signature does not match.' });
    expect(tag(wallet, 'api_key')).not.toContain('aria-invalid');
    expect(tag(wallet, 'consent-error')).toContain('role="alert"');
    expect(tag(consentPage(VIEW), 'api_key')).not.toContain('aria-invalid');
  });

  it('a refusal is said on load: the title starts "Error:" and the focus starts on the field refused, else on the refusal', () => {
    const key = consentPage({
      ...VIEW,
      error: 'This is not an API key of this service.',
      errorField: 'api_key',
    });
    expect(key).toContain('<title>Error: Sign in — allow an MCP host</title>');
    expect(tag(key, 'api_key')).toContain(' autofocus');
    expect(tag(key, 'consent-error')).not.toContain('autofocus');
    const wallet = consentPage({ ...VIEW, error: 'The signature does not match.' });
    expect(wallet).toContain('<title>Error: Sign in');
    expect(tag(wallet, 'consent-error')).toContain('tabindex="-1" autofocus');
    expect(tag(wallet, 'api_key')).not.toContain('autofocus');
    const calm = consentPage(VIEW);
    expect(calm).toContain('<title>Sign in — allow an MCP host</title>');
    expect(calm).not.toContain('autofocus');
  });

  it("an app's own scheme is worded as an app on the device, never as a web host", () => {
    const app = consentPage({ ...VIEW, redirectHost: 'www.cursor.com:', redirectApp: true });
    expect(app).toContain(
      'sent back to the app on this device that opens <code>www.cursor.com:</code> links',
    );
    expect(consentPage(VIEW)).toContain('sent back to <code>host.example</code>.');
  });

  it("the wallet sign-in's progress and refusals are announced (a live status)", () => {
    const status = tag(consentPage(VIEW), 'wallet-status');
    expect(status).toContain('role="status"');
    expect(status).toContain('aria-live="polite"');
  });

  it('every page names its icon (a data: URL): the browser asks no /favicon.ico to be refused', () => {
    for (const html of [consentPage(VIEW), errorPage('Sign-in expired', 'Start again from your MCP host.')]) {
      expect(html).toContain('<link rel="icon" href="data:,">');
    }
  });

  it("the consent page's forms may post here and be redirected on to the host's origin or app scheme only", () => {
    const policy = (redirectSource?: string) =>
      consentDocument({ ...VIEW, ...(redirectSource ? { redirectSource } : {}) }).policy;
    expect(policy('cursor:')).toContain("form-action 'self' cursor:;");
    expect(policy('https://host.example')).toContain("form-action 'self' https://host.example;");
    expect(policy()).toContain("form-action 'self';");
  });
});
