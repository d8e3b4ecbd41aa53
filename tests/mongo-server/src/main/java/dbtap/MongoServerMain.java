package dbtap;

import java.util.List;

import de.bwaldvogel.mongo.MongoServer;
import de.bwaldvogel.mongo.MongoVersion;
import de.bwaldvogel.mongo.backend.memory.MemoryBackend;

/**
 * Starts mongo-java-server's in-memory backend on 127.0.0.1:PORT until killed. It reports
 * wire version 17 (MongoDB 6.0) so that current drivers, which refuse the default wire
 * version, talk to it.
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

    public static void main(String[] args) throws Exception {
        int port = args.length > 0 ? Integer.parseInt(args[0]) : 27117;
        MongoServer server = new MongoServer(new MemoryBackend().version(V6_0));
        server.bind("127.0.0.1", port);
        System.out.println("listening on 127.0.0.1:" + port);
        Runtime.getRuntime().addShutdownHook(new Thread(server::shutdownNow));
        Thread.currentThread().join();
    }
}
