// The typed client class, the handler interface a server implements, and the service object that
// ties them to the descriptor. Every stub validates, then hands the call to the runtime.
import { StructureKind, VariableDeclarationKind, type MethodDeclarationStructure, type MethodSignatureStructure, type OptionalKind, type StatementStructures } from 'ts-morph';
import type { IrMethod, IrService } from '../model.ts';
import { docs } from './messages.ts';
import { methodNames, serviceNames } from './naming.ts';
import type { ModuleSymbols } from './symbols.ts';
import type { RemoteIndex } from './ts-types.ts';

/** The local helper that validates each message of a client stream as it passes. */
export const VALIDATED_STREAM = 'validatedStream';

export function validatedStreamStatement(): StatementStructures {
  return {
    kind: StructureKind.Function,
    name: VALIDATED_STREAM,
    isAsync: true,
    isGenerator: true,
    typeParameters: [{ name: 'T', constraint: 'Record<string, unknown>' }],
    parameters: [
      { name: 'messages', type: 'AsyncIterable<T> | Iterable<T>' },
      { name: 'validate', type: '(message: T) => void' },
    ],
    returnType: 'AsyncIterable<T>',
    statements: ['for await (const message of messages) {\n  validate(message);\n  yield message;\n}'],
    docs: ['Validates each message of a client stream before it is sent or handed to a handler.'],
  };
}

/** The message type names a method uses on each side. */
function messageTypes(service: IrService, m: IrMethod, remote: RemoteIndex) {
  const n = methodNames(service, m);
  return {
    ...n,
    argsIn: remote.fields(m.args) ? n.argsReceived : n.args,
    resultsIn: remote.fields(m.results) ? n.resultsReceived : n.results,
  };
}

export function serviceStatements(service: IrService, symbols: ModuleSymbols, remote: RemoteIndex): StatementStructures[] {
  const names = serviceNames(service);
  const client = symbols.runtime('Client');
  const callOptions = symbols.runtime('CallOptions');
  const ctx = symbols.runtime('CallContext');
  const server = symbols.runtime('Server');
  const d = names.descriptor;

  const clientMethods: OptionalKind<MethodDeclarationStructure>[] = service.methods.map((m) => {
    const t = messageTypes(service, m, remote);
    const method = `${d}.methods.${m.name}`;
    const options = { name: 'options', type: callOptions, hasQuestionToken: true };
    const base = { name: m.name, ...docs(m.doc, `Calls ${service.name}.${m.name}.`) };
    if (m.clientStreaming) {
      return {
        ...base, isAsync: true,
        parameters: [{ name: 'messages', type: `AsyncIterable<${t.args}> | Iterable<${t.args}>` }, options],
        returnType: `Promise<${t.resultsIn}>`,
        statements: [`return this.#client.clientStream(${method}, ${VALIDATED_STREAM}(messages, ${t.validateArgs}), options) as Promise<${t.resultsIn}>;`],
      };
    }
    const args = { name: 'args', type: t.args, ...(m.args.length === 0 ? { initializer: '{}' } : {}) };
    if (m.serverStreaming) {
      return {
        ...base, isAsync: true, isGenerator: true,
        parameters: [args, options],
        returnType: `AsyncIterable<${t.resultsIn}>`,
        statements: [`${t.validateArgs}(args);`, `yield* this.#client.serverStream(${method}, args, options) as AsyncIterable<${t.resultsIn}>;`],
      };
    }
    return {
      ...base, isAsync: true,
      parameters: [args, options],
      returnType: `Promise<${t.resultsIn}>`,
      statements: [`${t.validateArgs}(args);`, `return this.#client.unary(${method}, args, options) as Promise<${t.resultsIn}>;`],
    };
  });

  const handlerMethods: OptionalKind<MethodSignatureStructure>[] = service.methods.map((m) => {
    const t = messageTypes(service, m, remote);
    const base = { name: m.name, ...docs(m.doc) };
    const ctxParam = { name: 'ctx', type: ctx };
    if (m.clientStreaming) {
      return { ...base, parameters: [{ name: 'messages', type: `AsyncIterable<${t.argsIn}>` }, ctxParam], returnType: `Promise<${t.results}> | ${t.results}` };
    }
    if (m.serverStreaming) return { ...base, parameters: [{ name: 'args', type: t.argsIn }, ctxParam], returnType: `AsyncIterable<${t.results}>` };
    return { ...base, parameters: [{ name: 'args', type: t.argsIn }, ctxParam], returnType: `Promise<${t.results}> | ${t.results}` };
  });

  const registrations = service.methods.map((m) => {
    const t = messageTypes(service, m, remote);
    if (m.clientStreaming) {
      return `    ${m.name}: async (messages: AsyncIterable<${t.argsIn}>, ctx: ${ctx}) => handlers.${m.name}(${VALIDATED_STREAM}(messages, ${t.validateArgs}), ctx),`;
    }
    return `    ${m.name}: (args: ${t.argsIn}, ctx: ${ctx}) => {\n      ${t.validateArgs}(args);\n      return handlers.${m.name}(args, ctx);\n    },`;
  });

  return [
    {
      kind: StructureKind.Class,
      isExported: true,
      name: names.client,
      docs: [`Typed client of ${service.fullName}: each method validates its arguments, then calls through the runtime.`],
      properties: [{ name: '#client', isReadonly: true, type: client }],
      ctors: [{ parameters: [{ name: 'client', type: client }], statements: ['this.#client = client;'] }],
      methods: clientMethods,
    },
    {
      kind: StructureKind.Interface,
      isExported: true,
      name: names.handlers,
      docs: [`What a server of ${service.fullName} implements; arguments are validated before a handler is called.`],
      methods: handlerMethods,
    },
    {
      kind: StructureKind.VariableStatement,
      isExported: true,
      declarationKind: VariableDeclarationKind.Const,
      docs: [service.doc.length > 0 ? service.doc.join('\n') : `${service.fullName}: descriptor, typed client and handler registration.`],
      declarations: [{
        name: names.service,
        initializer: [
          '{',
          `  /** The data-only descriptor. */`,
          `  descriptor: ${d},`,
          `  /** A typed client over a connected runtime client. */`,
          `  client(client: ${client}): ${names.client} {`,
          `    return new ${names.client}(client);`,
          '  },',
          `  /** Registers \`handlers\` on \`server\`, validating each call's arguments before its handler runs. */`,
          `  register(server: ${server}, handlers: ${names.handlers}): ${server} {`,
          `    return server.register(${d}, {`,
          ...registrations.map((r) => `  ${r.replace(/\n/g, '\n  ')}`),
          '    });',
          '  },',
          '}',
        ].join('\n'),
      }],
    },
  ];
}
