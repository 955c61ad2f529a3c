// Lexer of the schema language. `///` doc comments are tokens (the parser attaches them to the
// next declaration); other comments and whitespace are dropped.
import type { DiagnosticBag, SourcePos } from './diagnostics.ts';

/** Kinds of token; keywords are identifiers that the parser recognises by text. */
export type TokenKind = 'ident' | 'int' | 'string' | 'doc' | 'punct' | 'eof';

/** One token with the position of its first character. */
export interface Token {
  kind: TokenKind;
  /** Identifier text, punctuation, the decoded string, the doc line, or the digits of an int. */
  text: string;
  pos: SourcePos;
}

const PUNCT2 = ['->'];
const PUNCT1 = new Set([...';{}()<>[],:?@=*.']);

/** Splits `source` into tokens; bad characters are reported and skipped. */
export function tokenize(file: string, source: string, diags: DiagnosticBag): Token[] {
  const tokens: Token[] = [];
  let i = 0;
  let line = 1;
  let lineStart = 0;
  const pos = (at: number): SourcePos => ({ file, line, col: at - lineStart + 1, offset: at });

  while (i < source.length) {
    const c = source[i]!;
    if (c === '\n') {
      i++;
      line++;
      lineStart = i;
    } else if (c === ' ' || c === '\t' || c === '\r') {
      i++;
    } else if (source.startsWith('///', i)) {
      const end = lineEnd(source, i);
      const text = source.slice(i + 3, end).replace(/^ /, '').trimEnd();
      tokens.push({ kind: 'doc', text, pos: pos(i) });
      i = end;
    } else if (source.startsWith('//', i)) {
      i = lineEnd(source, i);
    } else if (source.startsWith('/*', i)) {
      const start = pos(i);
      const close = source.indexOf('*/', i + 2);
      const end = close < 0 ? source.length : close + 2;
      if (close < 0) diags.error(start, 'unterminated block comment');
      for (let k = i; k < end; k++) {
        if (source[k] === '\n') {
          line++;
          lineStart = k + 1;
        }
      }
      i = end;
    } else if (/[A-Za-z_]/.test(c)) {
      const m = /^[A-Za-z_][A-Za-z0-9_]*/.exec(source.slice(i, i + 256))!;
      tokens.push({ kind: 'ident', text: m[0], pos: pos(i) });
      i += m[0].length;
    } else if (/[0-9]/.test(c)) {
      const m = /^[0-9]+/.exec(source.slice(i, i + 64))!;
      const start = pos(i);
      i += m[0].length;
      if (/[A-Za-z_]/.test(source[i] ?? '')) diags.error(pos(i), `unexpected character '${source[i]}' after number`);
      tokens.push({ kind: 'int', text: m[0], pos: start });
    } else if (c === '"') {
      const start = pos(i);
      const end = source.indexOf('"', i + 1);
      const nl = source.indexOf('\n', i + 1);
      if (end < 0 || (nl >= 0 && nl < end)) {
        diags.error(start, 'unterminated string');
        i = nl < 0 ? source.length : nl;
      } else {
        tokens.push({ kind: 'string', text: source.slice(i + 1, end), pos: start });
        i = end + 1;
      }
    } else if (PUNCT2.some((p) => source.startsWith(p, i))) {
      tokens.push({ kind: 'punct', text: source.slice(i, i + 2), pos: pos(i) });
      i += 2;
    } else if (PUNCT1.has(c)) {
      tokens.push({ kind: 'punct', text: c, pos: pos(i) });
      i++;
    } else {
      diags.error(pos(i), `unexpected character '${c}'`);
      i++;
    }
  }
  tokens.push({ kind: 'eof', text: '', pos: pos(i) });
  return tokens;
}

function lineEnd(source: string, from: number): number {
  const nl = source.indexOf('\n', from);
  return nl < 0 ? source.length : nl;
}
