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

  /** Renders all diagnostics; `sources` maps a file name to its text for the caret line. */
  format(sources: ReadonlyMap<string, string>): string {
    return this.sorted()
      .map((d) => formatDiagnostic(d, sources.get(d.pos.file)))
      .join('\n');
  }
}

/** Formats one diagnostic: header line, then the source line and a caret under the column. */
export function formatDiagnostic(d: Diagnostic, source: string | undefined): string {
  const header = `${d.pos.file}:${d.pos.line}:${d.pos.col}: ${d.severity}: ${d.message}`;
  if (source === undefined) return header;
  const lineText = source.split(/\r?\n/)[d.pos.line - 1] ?? '';
  // Tabs are kept in the caret line so that the caret lines up however the terminal renders them.
  const pad = lineText.slice(0, d.pos.col - 1).replace(/[^\t]/g, ' ');
  return `${header}\n  ${lineText}\n  ${pad}^`;
}
