package fenceproxy;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;

import org.redisson.Redisson;
import org.redisson.api.RedissonClient;
import org.redisson.config.Config;

/**
 * LockProbe takes Redisson RLocks by name at one address, for the failover suite
 * (test/clients/failover): {@code LockProbe host:port}. It connects (Redisson
 * single-server mode, as an application pointed at the proxy or at one Redis
 * would), prints {@code ready Redisson <version>}, then for each line read on
 * stdin (a lock name) calls {@code getLock(name).tryLock()} once and prints
 * {@code granted}, {@code refused} or {@code error <message>}. It exits at the
 * end of its input. One process is one client: its holder id is its own.
 */
public final class LockProbe {
    public static void main(String[] args) throws Exception {
        if (args.length != 1) {
            System.err.println("usage: LockProbe host:port (lock names on stdin)");
            System.exit(2);
        }
        Config config = new Config();
        config.useSingleServer().setAddress("redis://" + args[0]).setClientName("lock-probe")
                .setConnectionMinimumIdleSize(1).setConnectionPoolSize(2)
                .setTimeout(10000).setRetryAttempts(0);
        RedissonClient client;
        try {
            client = Redisson.create(config);
        } catch (Exception e) {
            System.out.println("error connecting: " + oneLine(e));
            System.exit(1);
            return;
        }
        System.out.println("ready Redisson " + Redisson.class.getPackage().getImplementationVersion());
        System.out.flush();
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        try {
            for (String name; (name = in.readLine()) != null;) {
                name = name.trim();
                if (name.isEmpty()) continue;
                String result;
                try {
                    result = client.getLock(name).tryLock() ? "granted" : "refused";
                } catch (Exception e) {
                    result = "error " + oneLine(e);
                }
                System.out.println(result);
                System.out.flush();
            }
        } finally {
            client.shutdown();
        }
    }

    private static String oneLine(Throwable e) {
        String s = e.getClass().getSimpleName() + ": " + e.getMessage();
        return s.replace('\n', ' ').replace('\r', ' ');
    }
}
