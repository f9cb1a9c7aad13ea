// Shared helpers of the Java conformance programs: self-checks that fail the process,
// and one-line outputs the pytest side parses.
import java.util.Properties;

final class Check {
    private Check() {}

    static void that(boolean condition, String message) {
        if (!condition) {
            throw new AssertionError(message);
        }
    }

    static void out(String line) {
        System.out.println(line);
        System.out.flush();
    }

    static Properties props(String bootstrap) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("request.timeout.ms", "20000");
        p.put("default.api.timeout.ms", "30000");
        return p;
    }
}
