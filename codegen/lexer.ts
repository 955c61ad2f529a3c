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

/** The longest name (identifier) the language takes. */
export const MAX_NAME = 256;

/** Splits `source` into tokens; bad characters are reported and skipped. */
export function tokenize(file: string, source: string, diags: DiagnosticBag): Token[] {
  const lexer = new Lexer(file, source, diags);
  // A byte order mark that an editor saved is no character of the file (it read as an invisible
  // "unexpected character").
  if (source.startsWith('\uFEFF')) lexer.i = lexer.lineStart = 1;
  while (lexer.i < source.length) lexer.step();
  lexer.tokens.push({ kind: 'eof', text: '', pos: lexer.pos(lexer.i) });
  return lexer.tokens;
}

/** Where tokenize is in `source` (offset `i`, its line and where that line starts) and the tokens
 *  read so far. */
class Lexer {
  readonly tokens: Token[] = [];
  i = 0;
  line = 1;
  lineStart = 0;

  constructor(readonly file: string, readonly source: string, readonly diags: DiagnosticBag) {}

  /** The position of offset `at`, on the current line. */
  pos(at: number): SourcePos {
    return { file: this.file, line: this.line, col: at - this.lineStart + 1, offset: at };
  }

  /** Reads the token at `i`, or skips the whitespace or comment there. */
  step(): void {
    const { source, tokens, diags } = this;
    const c = source[this.i]!;
    if (endsLine(source, this.i)) {
      // Every line terminator JavaScript knows ends a line here too: a bare CR had ended none,
      // so a file of CR line endings was one comment, and a doc comment took what followed a
      // CR into the generated module as code (a helper session's hostile schemas).
      this.i++;
      this.line++;
      this.lineStart = this.i;
    } else if (c === ' ' || c === '\t' || c === '\r') {
      this.i++;
    } else if (source.startsWith('///', this.i)) {
      const end = lineEnd(source, this.i);
      const text = source.slice(this.i + 3, end).replace(/^ /, '').trimEnd();
      tokens.push({ kind: 'doc', text, pos: this.pos(this.i) });
      this.i = end;
    } else if (source.startsWith('//', this.i)) {
      this.i = lineEnd(source, this.i);
    } else if (source.startsWith('/*', this.i)) {
      this.#blockComment();
    } else if (/[A-Za-z_]/.test(c)) {
      const m = /^[A-Za-z_][A-Za-z0-9_]*/.exec(source.slice(this.i, this.i + MAX_NAME + 1))!;
      // Read in one piece up to its limit, and said to be too long past it (it was cut in two).
      if (m[0].length > MAX_NAME) diags.error(this.pos(this.i), `a name longer than ${MAX_NAME} characters`);
      tokens.push({ kind: 'ident', text: m[0], pos: this.pos(this.i) });
      this.i += m[0].length;
      while (/[A-Za-z0-9_]/.test(source[this.i] ?? '')) this.i++;
    } else if (/[0-9]/.test(c)) {
      this.#number();
    } else if (c === '"') {
      this.#string();
    } else if (PUNCT2.some((p) => source.startsWith(p, this.i))) {
      tokens.push({ kind: 'punct', text: source.slice(this.i, this.i + 2), pos: this.pos(this.i) });
      this.i += 2;
    } else if (PUNCT1.has(c)) {
      tokens.push({ kind: 'punct', text: c, pos: this.pos(this.i) });
      this.i++;
    } else {
      diags.error(this.pos(this.i), `unexpected character '${c}'`);
      this.i++;
    }
  }

  /** Skips the block comment at `i`, counting the lines it spans. */
  #blockComment(): void {
    const start = this.pos(this.i);
    const close = this.source.indexOf('*/', this.i + 2);
    const end = close < 0 ? this.source.length : close + 2;
    if (close < 0) this.diags.error(start, 'unterminated block comment');
    for (let k = this.i; k < end; k++) {
      if (endsLine(this.source, k)) {
        this.line++;
        this.lineStart = k + 1;
      }
    }
    this.i = end;
  }

  /** Reads the int at `i`; a letter straight after its digits is reported. */
  #number(): void {
    const m = /^[0-9]+/.exec(this.source.slice(this.i, this.i + 64))!;
    const start = this.pos(this.i);
    this.i += m[0].length;
    if (/[A-Za-z_]/.test(this.source[this.i] ?? '')) this.diags.error(this.pos(this.i), `unexpected character '${this.source[this.i]}' after number`);
    this.tokens.push({ kind: 'int', text: m[0], pos: start });
  }

  /** Reads the string at `i`; one without its closing quote on its line is reported and skipped
   *  to that line's end. */
  #string(): void {
    const start = this.pos(this.i);
    const end = this.source.indexOf('"', this.i + 1);
    const nl = lineEnd(this.source, this.i + 1);
    if (end < 0 || nl < end) {
      this.diags.error(start, 'unterminated string');
      this.i = nl;
    } else {
      this.tokens.push({ kind: 'string', text: this.source.slice(this.i + 1, end), pos: start });
      this.i = end + 1;
    }
  }
}

/** Whether the character at `k` ends a line: LF, U+2028, U+2029, or a CR not followed by LF
 *  (the LF after it ends that line). */
function endsLine(source: string, k: number): boolean {
  const c = source[k];
  return c === '\n' || c === '\u2028' || c === '\u2029' || (c === '\r' && source[k + 1] !== '\n');
}

const LINE_TERMINATOR = /[\r\n\u2028\u2029]/g;

/** Where the line that `from` is on ends: its first line terminator, else the source's end. Found
 *  from `from` on without copying the rest of the source (a copy per comment made a file of
 *  comments quadratic). */
function lineEnd(source: string, from: number): number {
  LINE_TERMINATOR.lastIndex = from;
  return LINE_TERMINATOR.exec(source)?.index ?? source.length;
}
