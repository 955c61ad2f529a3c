// The service bench/rpc.ts measures: a call without a body, and a tensor sink.
import type { ServiceDescriptor } from '../core/index.ts';

const NAME = 'bench.rpc.v1.Bench';
export const BenchService: ServiceDescriptor = {
  name: NAME,
  methods: {
    ping: { name: 'ping', service: NAME, args: [], results: [], clientStreaming: false, serverStreaming: false },
    sink: {
      name: 'sink', service: NAME, clientStreaming: false, serverStreaming: false,
      args: [{ name: 'x', type: { kind: 'tensor', dtype: 'u8', shape: [{ kind: 'any' }], placement: { kind: 'host' } } }],
      results: [{ name: 'n', type: { kind: 'scalar', name: 'u64' } }],
    },
  },
};
