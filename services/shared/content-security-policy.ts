import { createHash } from 'node:crypto';

/** Sources a page may use beyond its own inline script and style (allowed by their hashes). */
export interface PageSources {
  script?: string[];
  style?: string[];
  connect?: string[];
  img?: string[];
  /** Where its forms may post, and (in some browsers) where a post may then be redirected; none: 'none'. */
  formAction?: string[];
}

/**
 * A strict Content-Security-Policy for an HTML page the service serves: nothing by default, its
 * inline `<script>` and `<style>` blocks by their SHA-256 hashes (read from the page itself, so a
 * page made per request gets its own), the sources given, no `<base>`, and never in a frame.
 */
export function pagePolicy(html: string, sources: PageSources = {}): string {
  const scripts = [...(sources.script ?? []), ...hashesOf(html, 'script')];
  const styles = [...(sources.style ?? []), ...hashesOf(html, 'style')];
  const formAction = sources.formAction?.length ? sources.formAction : ["'none'"];
  return [
    "default-src 'none'",
    ...(scripts.length ? [`script-src ${scripts.join(' ')}`] : []),
    ...(styles.length ? [`style-src ${styles.join(' ')}`] : []),
    ...(sources.connect?.length ? [`connect-src ${sources.connect.join(' ')}`] : []),
    ...(sources.img?.length ? [`img-src ${sources.img.join(' ')}`] : []),
    "base-uri 'none'",
    `form-action ${formAction.join(' ')}`,
    "frame-ancestors 'none'",
  ].join('; ');
}

/** The hash sources of a page's inline blocks of `tag` (written without attributes). */
function hashesOf(html: string, tag: 'script' | 'style'): string[] {
  const inline = new RegExp(`<${tag}>([\\s\\S]*?)</${tag}>`, 'g');
  return [...html.matchAll(inline)].map(
    (m) => `'sha256-${createHash('sha256').update(m[1]!, 'utf8').digest('base64')}'`,
  );
}
