package dbtap;

import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicLong;

import de.bwaldvogel.mongo.bson.Document;
import io.netty.channel.Channel;

import de.bwaldvogel.mongo.MongoServer;
import de.bwaldvogel.mongo.MongoVersion;
import de.bwaldvogel.mongo.backend.memory.MemoryBackend;

/**
 * Starts mongo-java-server's in-memory backend on 127.0.0.1:PORT until killed. It reports
 * wire version 17 (MongoDB 6.0) so that current drivers, which refuse the default wire
 * version, talk to it.
 *
 * <p>The server counts the commands it handles, per database and command name as received
 * (e.g. {@code dbtapwl.getMore}); the command {@code dbtapCommandCounts} (any database) returns
 * them as a document {@code {counts: {"db.cmd": n, ...}}}, itself not counted. These are the
 * server's own counts, the truth of the replay tests.
 */
public final class MongoServerMain {

    private static final MongoVersion V6_0 = new MongoVersion() {
        @Override
        public List<Integer> getVersionArray() {
            return List.of(6, 0, 0);
        }

        @Override
        public String toVersionString() {
            return "6.0.0";
        }

        @Override
        public int getWireVersion() {
            return 17;
        }
    };

    private static final Map<String, AtomicLong> COUNTS = new ConcurrentHashMap<>();

    /** The memory backend, counting every command it handles. */
    private static final class CountingBackend extends MemoryBackend {
        @Override
        public Document handleCommand(Channel channel, String database, String command, Document query) {
            if (command.equals("dbtapCommandCounts")) {
                Document counts = new Document();
                new TreeMap<>(COUNTS).forEach((k, v) -> counts.put(k, v.get()));
                Document out = new Document("counts", counts);
                out.put("ok", 1.0);
                return out;
            }
            String key = database + "." + command;
            count(key, 1);
            Document reply;
            try {
                reply = super.handleCommand(channel, database, command, query);
            } catch (RuntimeException e) {
                count(key + "!error", 1);
                throw e;
            }
            if (reply != null && reply.get("cursor") instanceof Document cursor) {
                Object batch = cursor.containsKey("firstBatch") ? cursor.get("firstBatch") : cursor.get("nextBatch");
                if (batch instanceof List<?> docs) {
                    count(key + "#docs", docs.size());
                }
            }
            return reply;
        }

        private static void count(String key, long n) {
            COUNTS.computeIfAbsent(key, k -> new AtomicLong()).addAndGet(n);
        }
    }

    public static void main(String[] args) throws Exception {
        int port = args.length > 0 ? Integer.parseInt(args[0]) : 27117;
        MongoServer server = new MongoServer(new CountingBackend().version(V6_0));
        server.bind("127.0.0.1", port);
        System.out.println("listening on 127.0.0.1:" + port);
        Runtime.getRuntime().addShutdownHook(new Thread(server::shutdownNow));
        Thread.currentThread().join();
    }
}
