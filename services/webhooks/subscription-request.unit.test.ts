import { describe, expect, it } from 'vitest';
import {
  CreateWebhookRequest,
  UpdateWebhookRequest,
  WebhookSettingsCheck,
} from '../../contracts/webhooks.ts';

const base = { url: 'https://example.com/hook', events: ['trade_call'] };

describe('subscription requests: one top:N in assets', () => {
  it('is refused in what a create or a PATCH gives', () => {
    expect(CreateWebhookRequest.safeParse({ ...base, assets: ['top:5', 'top:10'] }).success).toBe(false);
    expect(UpdateWebhookRequest.safeParse({ assets: ['top:5', 'top:10'] }).success).toBe(false);
    expect(CreateWebhookRequest.safeParse({ ...base, assets: ['BTC', 'top:10'] }).success).toBe(true);
  });

  it('is not asked of what a PATCH keeps: a subscription created with two still takes a PATCH of its url', () => {
    // What the PATCH leaves is checked whole; the assets it keeps were checked at their create.
    expect(WebhookSettingsCheck.safeParse({ ...base, assets: ['top:5', 'top:10'] }).success).toBe(true);
  });
});
