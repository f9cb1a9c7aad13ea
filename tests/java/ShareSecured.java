// A share consumer and the share admin calls over SASL_SSL as one user, for the ACL tests
// (tests/security/test_share_acls.py). Errors are printed, not thrown: "ERR <exception>".
// Usage: ShareSecured BOOTSTRAP CA_PEM USER PASSWORD consume GROUP TOPIC COUNT MAX_MS
//        (accepts each record: "R <offset> <value>", then "DONE <n>")
//      | ShareSecured BOOTSTRAP CA_PEM USER PASSWORD describe GROUP   ("DESCRIBE <state>")
//      | ShareSecured BOOTSTRAP CA_PEM USER PASSWORD configs GROUP
//        (sets share.auto.offset.reset=earliest, then "CONFIG <name> <value> <source>")
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.ExecutionException;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.serialization.StringDeserializer;

public final class ShareSecured {
    public static void main(String[] args) throws Exception {
        Properties p = SecurityScenario.sasl(args[0], args[1], "SCRAM-SHA-256", args[2], args[3]);
        String group = args[5];
        try {
            switch (args[4]) {
                case "consume" -> consume(p, group, args[6], Integer.parseInt(args[7]),
                        Long.parseLong(args[8]));
                case "describe" -> describe(p, group);
                case "configs" -> configs(p, group);
                default -> throw new IllegalArgumentException(args[4]);
            }
        } catch (ExecutionException e) {
            Check.out("ERR " + e.getCause().getClass().getSimpleName() + " " + e.getCause().getMessage());
        }
    }

    static void consume(Properties p, String group, String topic, int count, long maxMs) {
        p.put("group.id", group);
        p.put("key.deserializer", StringDeserializer.class.getName());
        p.put("value.deserializer", StringDeserializer.class.getName());
        int n = 0;
        long deadline = System.currentTimeMillis() + maxMs;
        try (KafkaShareConsumer<String, String> c = new KafkaShareConsumer<>(p)) {
            c.subscribe(List.of(topic));
            while (n < count && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(500))) {
                    Check.out("R " + r.offset() + " " + r.value());
                    n++;
                }
            }
            c.commitSync(Duration.ofSeconds(20));
        } catch (RuntimeException e) {
            Check.out("ERR " + e.getClass().getSimpleName() + " " + e.getMessage());
        }
        Check.out("DONE " + n);
    }

    static void describe(Properties p, String group) throws Exception {
        try (Admin admin = Admin.create(p)) {
            Check.out("DESCRIBE " + admin.describeShareGroups(List.of(group)).all().get()
                    .get(group).groupState());
        }
    }

    static void configs(Properties p, String group) throws Exception {
        try (Admin admin = Admin.create(p)) {
            ConfigResource r = new ConfigResource(ConfigResource.Type.GROUP, group);
            AlterConfigOp op = new AlterConfigOp(
                    new ConfigEntry("share.auto.offset.reset", "earliest"), AlterConfigOp.OpType.SET);
            admin.incrementalAlterConfigs(Map.of(r, List.of(op))).all().get();
            Config config = admin.describeConfigs(List.of(r)).all().get().get(r);
            for (ConfigEntry e : config.entries()) {
                Check.out("CONFIG " + e.name() + " " + e.value() + " " + e.source());
            }
        }
    }
}
