// Recursive-descent parser of the schema language. On a syntax error it reports, skips to the end
// of the current member or declaration and carries on, so that one run shows every error.
import type {
  DeclNode, DimNode, EnumNode, FieldNode, FileNode, MethodNode, NameNode, PlacementNode, ServiceNode,
  StructNode, TypeNode,
} from './ast.ts';
import type { DiagnosticBag, SourcePos } from './diagnostics.ts';
import { tokenize, type Token } from './lexer.ts';

/** Thrown inside the parser to unwind to the nearest recovery point; never escapes `parse`. */
class SyntaxFailure extends Error {}

/** The deepest list<> and map<> nesting a type may have. */
export const MAX_TYPE_DEPTH = 64;

/** Parses one schema file; syntax errors go to `diags` and the tree holds what could be read. */
export function parse(file: string, source: string, diags: DiagnosticBag): FileNode {
  return new Parser(tokenize(file, source, diags), diags).file(file);
}

class Parser {
  private i = 0;

  constructor(
    private readonly tokens: Token[],
    private readonly diags: DiagnosticBag,
  ) {}

  file(file: string): FileNode {
    const node: FileNode = { file, imports: [], doc: [], decls: [] };
    let doc = this.docs();
    if (this.isWord('package')) {
      node.doc = doc;
      this.recover(['}'], () => {
        this.next();
        node.package = this.qualifiedName();
        this.expect(';');
      });
      doc = this.docs();
    }
    while (this.isWord('import')) {
      this.recover(['}'], () => {
        this.next();
        const t = this.expectKind('string', 'a quoted file name');
        const twice = node.imports.find((imp) => imp.text === t.text);
        if (twice !== undefined) this.diags.error(t.pos, `"${t.text}" is imported already (line ${twice.pos.line})`);
        else node.imports.push({ text: t.text, pos: t.pos });
        this.expect(';');
      });
      doc = this.docs();
    }
    while (this.peek().kind !== 'eof') {
      const start = this.i;
      this.recover(['}'], () => {
        const decl = this.decl(doc);
        if (decl) node.decls.push(decl);
      });
      if (this.i === start) this.next();
      doc = this.docs();
    }
    return node;
  }

  private decl(doc: string[]): DeclNode | undefined {
    const t = this.peek();
    if (this.isWord('struct')) return this.struct(doc);
    if (this.isWord('enum')) return this.enumDecl(doc);
    if (this.isWord('service')) return this.service(doc);
    if (this.isWord('package') || this.isWord('import')) {
      return this.fail(t.pos, `'${t.text}' must come before any declaration`);
    }
    return this.fail(t.pos, `expected 'struct', 'enum' or 'service', found ${describe(t)}`);
  }

  private struct(doc: string[]): StructNode {
    this.next();
    const node: StructNode = { kind: 'struct', name: this.name(), fields: [], doc };
    this.block(() => {
      const fieldDoc = this.docs();
      node.fields.push(this.field(fieldDoc));
      this.expect(';');
    });
    return node;
  }

  private enumDecl(doc: string[]): EnumNode {
    this.next();
    const node: EnumNode = { kind: 'enum', name: this.name(), values: [], doc };
    this.block(() => {
      const valueDoc = this.docs();
      const name = this.name();
      this.expect('=');
      const value = this.expectKind('int', 'an enum value number');
      node.values.push({ name, value: this.intValue(value), doc: valueDoc });
      this.expect(';');
    });
    return node;
  }

  private service(doc: string[]): ServiceNode {
    this.next();
    const node: ServiceNode = { kind: 'service', name: this.name(), methods: [], doc };
    this.block(() => {
      const methodDoc = this.docs();
      const t = this.peek();
      if (!this.isWord('rpc')) this.fail(t.pos, `expected 'rpc', found ${describe(t)}`);
      this.next();
      node.methods.push(this.method(methodDoc));
    });
    return node;
  }

  private method(doc: string[]): MethodNode {
    const name = this.name();
    this.expect('(');
    // A leading `stream` (not followed by `:`, which would make it a field name) streams the arguments.
    const clientStreaming = this.isWord('stream') && this.peek(1).text !== ':';
    if (clientStreaming) this.next();
    const args = this.fieldList();
    this.expect('->');
    const serverStreaming = this.isWord('stream');
    if (serverStreaming) this.next();
    this.expect('(');
    const results = this.fieldList();
    this.expect(';');
    return { name, args, results, clientStreaming, serverStreaming, doc };
  }

  /** Fields up to and including the closing `)`; a trailing comma is allowed. */
  private fieldList(): FieldNode[] {
    const fields: FieldNode[] = [];
    while (!this.isPunct(')')) {
      fields.push(this.field(this.docs()));
      if (!this.isPunct(',')) break;
      this.next();
    }
    this.expect(')');
    return fields;
  }

  private field(doc: string[]): FieldNode {
    const name = this.name();
    this.expect(':');
    return { name, type: this.type(), doc };
  }

  /** How deep list<> and map<> nest in the type being read. */
  #typeDepth = 0;

  /** `base`, then `?` for optional, then a placement: `tensor<f16, [n]>? @cuda`. Nesting deeper
   *  than MAX_TYPE_DEPTH is an error (5,000 levels overflowed the parser's stack, 700 the
   *  emitter's). */
  type(): TypeNode {
    if (this.#typeDepth > MAX_TYPE_DEPTH) return this.fail(this.peek().pos, `types nest more than ${MAX_TYPE_DEPTH} deep`);
    this.#typeDepth++;
    try {
      return this.#typeAt();
    } finally {
      this.#typeDepth--;
    }
  }

  #typeAt(): TypeNode {
    let node = this.baseType();
    if (this.isPunct('?')) {
      const q = this.next();
      node = { kind: 'optional', inner: node, pos: q.pos };
    }
    if (this.isPunct('@')) node.placement = this.placement();
    return node;
  }

  private baseType(): TypeNode {
    const start = this.peek();
    if (start.kind !== 'ident') return this.fail(start.pos, `expected a type, found ${describe(start)}`);
    const next = this.peek(1);
    if (next.text === '<' && start.text === 'list') {
      this.next();
      this.next();
      const element = this.type();
      this.expect('>');
      return { kind: 'list', element, pos: start.pos };
    }
    if (next.text === '<' && start.text === 'map') {
      this.next();
      this.next();
      const key = this.type();
      this.expect(',');
      const value = this.type();
      this.expect('>');
      return { kind: 'map', key, value, pos: start.pos };
    }
    if (next.text === '<' && start.text === 'tensor') return this.tensor();
    const name = this.qualifiedName();
    return { kind: 'named', name: name.text, pos: name.pos };
  }

  private tensor(): TypeNode {
    const start = this.next();
    this.next();
    const dtype = this.name();
    this.expect(',');
    this.expect('[');
    const dims: DimNode[] = [];
    while (!this.isPunct(']')) {
      dims.push(this.dim());
      if (!this.isPunct(',')) break;
      this.next();
    }
    this.expect(']');
    this.expect('>');
    return { kind: 'tensor', dtype, dims, pos: start.pos };
  }

  private dim(): DimNode {
    const t = this.next();
    if (t.kind === 'int') return { kind: 'fixed', size: this.intValue(t), pos: t.pos };
    if (t.kind === 'ident' && this.isPunct('=')) {
      this.next();
      const size = this.expectKind('int', 'a dimension size');
      return { kind: 'fixed', size: this.intValue(size), name: t.text, pos: t.pos };
    }
    if (t.kind === 'ident') return { kind: 'symbol', name: t.text, pos: t.pos };
    if (t.text === '*') return { kind: 'any', pos: t.pos };
    return this.fail(t.pos, `expected a dimension (a number, a name or '*'), found ${describe(t)}`);
  }

  private placement(): PlacementNode {
    const at = this.next();
    const word = this.expectKind('ident', "a placement ('host', 'cuda' or 'remote')");
    if (word.text === 'host' || word.text === 'remote') return { kind: word.text, pos: at.pos };
    if (word.text !== 'cuda') return this.fail(word.pos, `unknown placement '@${word.text}' (expected @host, @cuda, @cuda(N) or @remote)`);
    if (!this.isPunct('(')) return { kind: 'cuda', pos: at.pos };
    this.next();
    const device = this.expectKind('int', 'a device number');
    this.expect(')');
    return { kind: 'cuda', device: this.intValue(device), pos: at.pos };
  }

  /** `{ member* }` where each member is parsed by `member`; errors skip to the next `;`. */
  private block(member: () => void): void {
    this.expect('{');
    while (!this.isPunct('}')) {
      if (this.peek().kind === 'eof') return void this.fail(this.peek().pos, "expected '}' before end of file");
      const start = this.i;
      this.recover([';'], member);
      if (this.i === start) this.next();
    }
    this.next();
  }

  /** Runs `body`; on a syntax failure skips past the next token in `stops` (or stops before `}`). */
  private recover(stops: string[], body: () => void): void {
    try {
      body();
    } catch (e) {
      if (!(e instanceof SyntaxFailure)) throw e;
      while (this.peek().kind !== 'eof') {
        const t = this.peek();
        if (t.kind === 'punct' && stops.includes(t.text)) {
          this.next();
          return;
        }
        if (t.kind === 'punct' && t.text === '}') return;
        this.next();
      }
    }
  }

  /** The value of an int token; one past 2^53 would silently lose digits, so it is an error. */
  private intValue(t: Token): number {
    const n = Number(t.text);
    if (!Number.isSafeInteger(n)) this.diags.error(t.pos, `number ${t.text} is too large`);
    return n;
  }

  private qualifiedName(): NameNode {
    const first = this.name();
    let text = first.text;
    while (this.isPunct('.')) {
      this.next();
      text += '.' + this.name().text;
    }
    return { text, pos: first.pos };
  }

  private name(): NameNode {
    const t = this.expectKind('ident', 'a name');
    return { text: t.text, pos: t.pos };
  }

  private docs(): string[] {
    const lines: string[] = [];
    while (this.tokens[this.i]?.kind === 'doc') lines.push(this.tokens[this.i++]!.text);
    return lines;
  }

  /** The `ahead`-th token from here, skipping doc comments (which only some places take). */
  private peek(ahead = 0): Token {
    let j = this.i;
    for (;;) {
      while (this.tokens[j]!.kind === 'doc') j++;
      if (ahead === 0 || this.tokens[j]!.kind === 'eof') return this.tokens[j]!;
      ahead--;
      j++;
    }
  }

  private next(): Token {
    while (this.tokens[this.i]!.kind === 'doc') this.i++;
    const t = this.tokens[this.i]!;
    if (t.kind !== 'eof') this.i++;
    return t;
  }

  private isWord(word: string): boolean {
    const t = this.peek();
    return t.kind === 'ident' && t.text === word;
  }

  private isPunct(p: string): boolean {
    const t = this.peek();
    return t.kind === 'punct' && t.text === p;
  }

  private expect(p: string): Token {
    const t = this.peek();
    if (t.kind !== 'punct' || t.text !== p) this.fail(t.pos, `expected '${p}', found ${describe(t)}`);
    return this.next();
  }

  private expectKind(kind: Token['kind'], what: string): Token {
    const t = this.peek();
    if (t.kind !== kind) this.fail(t.pos, `expected ${what}, found ${describe(t)}`);
    return this.next();
  }

  private fail(pos: SourcePos, message: string): never {
    this.diags.error(pos, message);
    throw new SyntaxFailure(message);
  }
}

function describe(t: Token): string {
  if (t.kind === 'eof') return 'end of file';
  if (t.kind === 'string') return `"${t.text}"`;
  return `'${t.text}'`;
}
