/** A schema as the tests read it from /openapi.json: properties with their descriptions, or a union. */
export interface DocumentedSchema {
  properties?: Record<string, { description?: string }>;
  anyOf?: DocumentedSchema[];
}

/**
 * The schema a running service's /openapi.json declares for a GET route's 200 answer in one media
 * type: what a client generated from the document would read the answer as.
 */
export async function answerSchema(base: string, path: string, mediaType: string): Promise<DocumentedSchema> {
  const doc = (await (await fetch(`${base}/openapi.json`)).json()) as {
    paths: Record<
      string,
      { get: { responses: Record<string, { content: Record<string, { schema: DocumentedSchema }> }> } }
    >;
  };
  return doc.paths[path]!.get.responses['200']!.content[mediaType]!.schema;
}
