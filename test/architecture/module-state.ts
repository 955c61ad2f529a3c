// Finds module-level mutable state in a source file (STYLE.md 14: process-wide state lives in a
// Runtime that is created, passed and closed). A scan of the lines that start a statement at
// column 0, plus class statics, is enough: the sources are formatted, and a declaration that
// slipped past this would still have to survive review.

/** One piece of mutable state: its name as declared and the kind of declaration. */
export interface ModuleState { name: string; kind: 'let' | 'var' | 'collection' | 'static' }

const BINDING = /^(?:export\s+)?(let|var)\s+(\w+)/gm;
const COLLECTION = /^(?:export\s+)?const\s+(\w+)\s*(?::[^=]+)?=\s*new\s+(?:Map|Set|WeakMap|WeakSet)\b/gm;
// A static field that is not readonly (a method has a parenthesis after its name).
const STATIC_FIELD = /^\s+(?:private\s+|protected\s+|public\s+)?static\s+(#?\w+)\s*[:=;!?]/gm;

/** The module-level mutable state that `source` declares: top-level `let`/`var`, top-level
 *  collections that the file mutates, and mutable static fields (the same thing, in a class). */
export function moduleState(source: string): ModuleState[] {
  const text = source.replace(/\/\*[\s\S]*?\*\//g, '').replace(/(^|[^:'"])\/\/.*$/gm, '$1');
  const found: ModuleState[] = [];
  for (const m of text.matchAll(BINDING)) found.push({ name: m[2]!, kind: m[1] as 'let' | 'var' });
  for (const m of text.matchAll(COLLECTION)) {
    const mutated = new RegExp(`\\b${m[1]}\\.(set|add|delete|clear)\\(`).test(text);
    if (mutated) found.push({ name: m[1]!, kind: 'collection' });
  }
  for (const m of text.matchAll(STATIC_FIELD)) found.push({ name: m[1]!, kind: 'static' });
  return found;
}
