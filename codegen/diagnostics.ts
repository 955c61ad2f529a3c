// Diagnostics collected by every pass. Passes keep going after an error so that one run reports
// everything wrong in a file, the way a compiler user expects.

/** A position in a schema file; line and column are 1-based. */
export interface SourcePos {
  file: string;
  line: number;
  col: number;
  /** Byte offset into the file text, for slicing the source line. */
  offset: number;
}

/** Errors stop generation; warnings are printed only. */
export type Severity = 'error' | 'warning';

/** One problem found in a schema, pointing at the place that caused it. */
export interface Diagnostic {
  severity: Severity;
  pos: SourcePos;
  message: string;
}

/** Collects diagnostics and renders them as `file:line:col: error: message` with a caret line. */
export class DiagnosticBag {
  readonly items: Diagnostic[] = [];

  error(pos: SourcePos, message: string): void {
    this.items.push({ severity: 'error', pos, message });
  }

  warning(pos: SourcePos, message: string): void {
    this.items.push({ severity: 'warning', pos, message });
  }

  get hasErrors(): boolean {
    return this.items.some((d) => d.severity === 'error');
  }

  /** Diagnostics in file order, then position order, so output is stable across passes. */
  sorted(): Diagnostic[] {
    return [...this.items].sort(
      (a, b) => a.pos.file.localeCompare(b.pos.file) || a.pos.offset - b.pos.offset,
    );
  }

  /** Renders the diagnostics, MAX_SHOWN_PER_FILE of a file at most (then how many more);
   *  `sources` maps a file name to its text for the caret line. Each file's text is split into
   *  lines once: split per diagnostic, 20,000 errors of one file took 15 s to print. */
  format(sources: ReadonlyMap<string, string>): string {
    const lines = new Map<string, string[]>();
    const shown = new Map<string, number>();
    const out: string[] = [];
    for (const d of this.sorted()) {
      const count = (shown.get(d.pos.file) ?? 0) + 1;
      shown.set(d.pos.file, count);
      if (count > MAX_SHOWN_PER_FILE) continue;
      const source = sources.get(d.pos.file);
      let split = lines.get(d.pos.file);
      if (source !== undefined && split === undefined) lines.set(d.pos.file, split = source.split(LINE_BREAK));
      out.push(formatDiagnostic(d, split));
    }
    for (const [file, count] of shown) {
      if (count > MAX_SHOWN_PER_FILE) out.push(`${file}: ${count - MAX_SHOWN_PER_FILE} more diagnostics not shown`);
    }
    return out.join('\n');
  }
}

/** The most diagnostics format() prints of one file. */
export const MAX_SHOWN_PER_FILE = 100;

/** What ends a line, as the lexer counts lines. */
const LINE_BREAK = /\r\n|[\r\n\u2028\u2029]/;

/** Formats one diagnostic: header line, then the source line and a caret under the column.
 *  `source`: the file's text, or its lines. */
export function formatDiagnostic(d: Diagnostic, source: string | string[] | undefined): string {
  const header = `${d.pos.file}:${d.pos.line}:${d.pos.col}: ${d.severity}: ${d.message}`;
  if (source === undefined) return header;
  const lineText = (typeof source === 'string' ? source.split(LINE_BREAK) : source)[d.pos.line - 1] ?? '';
  // Tabs are kept in the caret line so that the caret lines up however the terminal renders them.
  const pad = lineText.slice(0, d.pos.col - 1).replace(/[^\t]/g, ' ');
  return `${header}\n  ${lineText}\n  ${pad}^`;
}
