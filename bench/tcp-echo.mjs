// The node-tcp side of bench/idle-gap.ts, in a process of its own (plain JavaScript, no loader):
// listens on 127.0.0.1, echoes every chunk back on its socket, tells its parent the port over IPC,
// and exits when the parent disconnects.
import { createServer } from 'node:net';

const server = createServer((socket) => {
  socket.setNoDelay(true);
  socket.on('data', (chunk) => socket.write(chunk));
});
server.listen(0, '127.0.0.1', () => process.send(server.address().port));
process.on('disconnect', () => process.exit(0));
