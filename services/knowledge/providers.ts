import type { Config } from '../../contracts/config.ts';

/**
 * Generative chat providers, spoken over plain HTTP: the OpenAI-compatible chat completions API
 * (OpenAI, vLLM, llama.cpp, Ollama, OpenRouter...) and Anthropic's messages API. The model sees
 * only the retrieved passages; what it answers is checked by the caller.
 */
export interface ChatProvider {
  readonly kind: 'openai-compatible' | 'anthropic';
  complete(request: { model: string; system: string; user: string; signal: AbortSignal }): Promise<string>;
}

/** The provider failed, answered out of protocol, or did not answer in time. */
export class ProviderError extends Error {
  override readonly name = 'ProviderError';
}

async function post(url: string, headers: Record<string, string>, body: unknown, signal: AbortSignal) {
  let res: Response;
  try {
    res = await fetch(url, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...headers },
      body: JSON.stringify(body),
      signal,
    });
  } catch (err) {
    const reason = signal.aborted ? 'timed out' : (err as Error).message;
    throw new ProviderError(`provider request failed: ${reason}`, { cause: err });
  }
  let json: unknown;
  try {
    json = await res.json();
  } catch (err) {
    throw new ProviderError(
      signal.aborted ? 'provider timed out' : `provider answered ${res.status} without JSON`,
      { cause: err },
    );
  }
  if (!res.ok) throw new ProviderError(`provider answered ${res.status}`);
  return json as Record<string, unknown>;
}

function openAiCompatible(baseUrl: string, apiKey: string | undefined): ChatProvider {
  const url = `${baseUrl.replace(/\/+$/, '')}/chat/completions`;
  return {
    kind: 'openai-compatible',
    async complete({ model, system, user, signal }) {
      const json = await post(
        url,
        apiKey ? { authorization: `Bearer ${apiKey}` } : {},
        {
          model,
          temperature: 0,
          messages: [
            { role: 'system', content: system },
            { role: 'user', content: user },
          ],
        },
        signal,
      );
      const content = (json.choices as { message?: { content?: unknown } }[] | undefined)?.[0]?.message
        ?.content;
      if (typeof content !== 'string')
        throw new ProviderError('provider answer has no choices[0].message.content');
      return content;
    },
  };
}

function anthropic(baseUrl: string, apiKey: string | undefined): ChatProvider {
  const url = `${baseUrl.replace(/\/+$/, '')}/v1/messages`;
  return {
    kind: 'anthropic',
    async complete({ model, system, user, signal }) {
      const json = await post(
        url,
        { 'anthropic-version': '2023-06-01', ...(apiKey ? { 'x-api-key': apiKey } : {}) },
        { model, max_tokens: 800, temperature: 0, system, messages: [{ role: 'user', content: user }] },
        signal,
      );
      const blocks = json.content as { type?: string; text?: unknown }[] | undefined;
      const text = blocks?.filter((b) => b.type === 'text' && typeof b.text === 'string').map((b) => b.text);
      if (!text || text.length === 0) throw new ProviderError('provider answer has no text content block');
      return text.join('');
    },
  };
}

export function chatProvider(
  config: Pick<Config, 'CHAT_PROVIDER' | 'CHAT_BASE_URL' | 'CHAT_API_KEY'>,
): ChatProvider | null {
  if (config.CHAT_PROVIDER === 'none' || !config.CHAT_BASE_URL) return null;
  return config.CHAT_PROVIDER === 'anthropic'
    ? anthropic(config.CHAT_BASE_URL, config.CHAT_API_KEY)
    : openAiCompatible(config.CHAT_BASE_URL, config.CHAT_API_KEY);
}
