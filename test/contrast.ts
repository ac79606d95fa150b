import { expect } from 'vitest';

/** WCAG 2 contrast ratio of two #rgb or #rrggbb colours (the pages' accessibility tests). */
export function contrast(a: string, b: string): number {
  const luminance = (colour: string) => {
    expect(colour).toMatch(/^#([0-9a-f]{3}){1,2}$/i);
    const hex = colour.length === 4 ? `#${[...colour.slice(1)].map((c) => c + c).join('')}` : colour;
    const [r, g, b] = [1, 3, 5].map((i) => {
      const c = Number.parseInt(hex.slice(i, i + 2), 16) / 255;
      return c <= 0.03928 ? c / 12.92 : ((c + 0.055) / 1.055) ** 2.4;
    });
    return 0.2126 * r! + 0.7152 * g! + 0.0722 * b!;
  };
  const [dark, light] = [luminance(a), luminance(b)].sort((x, y) => x - y);
  return (light! + 0.05) / (dark! + 0.05);
}
