// The typed client class, the handler interface a server implements, and the service object that
// ties them to the descriptor. The runtime validates arguments before it sends a request and
// before it calls a handler (and results on both sides) with this descriptor, so the stubs only
// delegate: validating here as well would pay for the same checks twice on every call.
import { StructureKind, VariableDeclarationKind, type MethodDeclarationStructure, type MethodSignatureStructure, type OptionalKind, type StatementStructures } from 'ts-morph';
import type { IrMethod, IrService } from '../model.ts';
import { docs } from './messages.ts';
import { methodNames, serviceNames } from './naming.ts';
import type { ModuleSymbols } from './symbols.ts';
import type { RemoteIndex } from './ts-types.ts';

/** The message type names a method uses on each side. */
function messageTypes(service: IrService, m: IrMethod, remote: RemoteIndex) {
  const n = methodNames(service, m);
  return {
    ...n,
    argsIn: remote.fields(m.args) ? n.argsReceived : n.args,
    resultsIn: remote.fields(m.results) ? n.resultsReceived : n.results,
  };
}

/** The client class, the handler interface and the service object of one service. */
export function serviceStatements(service: IrService, symbols: ModuleSymbols, remote: RemoteIndex): StatementStructures[] {
  const names = serviceNames(service);
  const client = symbols.runtime('Client');
  const ctx = symbols.runtime('CallContext');
  const server = symbols.runtime('Server');
  return [
    {
      kind: StructureKind.Class,
      isExported: true,
      name: names.client,
      docs: [`Typed client of ${service.fullName}. The runtime validates arguments before sending and results on arrival.`],
      properties: [{ name: '#client', isReadonly: true, type: client }],
      ctors: [{
        parameters: [{ name: 'client', type: client }],
        statements: ['this.#client = client;'],
      }],
      methods: service.methods.map((m) => clientMethod(service, m, symbols, remote)),
    },
    {
      kind: StructureKind.Interface,
      isExported: true,
      name: names.handlers,
      docs: [`What a server of ${service.fullName} implements; the runtime validates arguments before a handler is called.`],
      methods: service.methods.map((m) => handlerMethod(service, m, ctx, remote)),
    },
    {
      kind: StructureKind.VariableStatement,
      isExported: true,
      declarationKind: VariableDeclarationKind.Const,
      ...docs(service.doc, `${service.fullName}: descriptor, typed client and handler registration.`),
      declarations: [{
        name: names.service,
        initializer: [
          '{',
          `  /** The data-only descriptor. */`,
          `  descriptor: ${names.descriptor},`,
          `  /** A typed client over a connected runtime client. */`,
          `  client(client: ${client}): ${names.client} {`,
          `    return new ${names.client}(client);`,
          '  },',
          `  /** Registers \`handlers\` on \`server\` (methods are called on \`handlers\`, so classes work). */`,
          ...registerLines(service, names, server, ctx, remote),
          '}',
        ].join('\n'),
      }],
    },
  ];
}

/** The body of `register`: one delegating arrow per method (none for a service without methods),
 *  each only where the handler is a function: a missing one (a JavaScript caller, a cast) reaches
 *  Server.register as it is, which refuses it before serving anything, instead of an arrow that
 *  failed each call INTERNAL "handlers.x is not a function". */
function registerLines(service: IrService, names: ReturnType<typeof serviceNames>, server: string, ctx: string, remote: RemoteIndex): string[] {
  if (service.methods.length === 0) {
    return [
      `  register(server: ${server}, _handlers: ${names.handlers}): ${server} {`,
      `    return server.register(${names.descriptor}, {});`,
      '  },',
    ];
  }
  return [
    `  register(server: ${server}, handlers: ${names.handlers}): ${server} {`,
    `    return server.register(${names.descriptor}, {`,
    ...service.methods.map((m) => {
      const t = messageTypes(service, m, remote);
      const args = m.clientStreaming ? `messages: AsyncIterable<${t.argsIn}>` : `args: ${t.argsIn}`;
      // The runtime wants a promise from a client-streaming handler; an async arrow makes one.
      const arrow = m.clientStreaming ? 'async ' : '';
      return `      ${m.name}: typeof handlers.${m.name} !== 'function' ? handlers.${m.name} : ${arrow}(${args}, ctx: ${ctx}) => handlers.${m.name}(${m.clientStreaming ? 'messages' : 'args'}, ctx),`;
    }),
    '    });',
    '  },',
  ];
}

function clientMethod(service: IrService, m: IrMethod, symbols: ModuleSymbols, remote: RemoteIndex): OptionalKind<MethodDeclarationStructure> {
  const t = messageTypes(service, m, remote);
  const method = `${serviceNames(service).descriptor}.methods.${m.name}`;
  const options = { name: 'options', type: symbols.runtime('CallOptions'), hasQuestionToken: true };
  const base = { name: m.name, ...docs(m.doc, `Calls ${service.name}.${m.name}.`) };
  if (m.clientStreaming) {
    return {
      ...base,
      parameters: [{ name: 'messages', type: `AsyncIterable<${t.args}> | Iterable<${t.args}>` }, options],
      returnType: `Promise<${t.resultsIn}>`,
      statements: [`return this.#client.clientStream(${method}, messages, options) as Promise<${t.resultsIn}>;`],
    };
  }
  const args = { name: 'args', type: t.args, ...(m.args.length === 0 ? { initializer: '{}' } : {}) };
  if (m.serverStreaming) {
    return {
      ...base,
      parameters: [args, options],
      returnType: `AsyncIterable<${t.resultsIn}>`,
      statements: [`return this.#client.serverStream(${method}, args, options) as AsyncIterable<${t.resultsIn}>;`],
    };
  }
  return {
    ...base,
    parameters: [args, options],
    returnType: `Promise<${t.resultsIn}>`,
    statements: [`return this.#client.unary(${method}, args, options) as Promise<${t.resultsIn}>;`],
  };
}

function handlerMethod(service: IrService, m: IrMethod, ctx: string, remote: RemoteIndex): OptionalKind<MethodSignatureStructure> {
  const t = messageTypes(service, m, remote);
  const base = { name: m.name, ...docs(m.doc) };
  const ctxParam = { name: 'ctx', type: ctx };
  if (m.clientStreaming) {
    return { ...base, parameters: [{ name: 'messages', type: `AsyncIterable<${t.argsIn}>` }, ctxParam], returnType: `Promise<${t.results}> | ${t.results}` };
  }
  if (m.serverStreaming) return { ...base, parameters: [{ name: 'args', type: t.argsIn }, ctxParam], returnType: `AsyncIterable<${t.results}>` };
  return { ...base, parameters: [{ name: 'args', type: t.argsIn }, ctxParam], returnType: `Promise<${t.results}> | ${t.results}` };
}
