// CreateTopics as the Admin client sends it: validateOnly (answered as the creation
// would be, nothing created), explicit replica assignments (taken, or refused with
// Kafka 4.x's errors), invalid partition counts and replication factors, configs Kafka 4.x
// refuses (the Kafka 3.x names it removed, segment.bytes below its minimum). Prints one
// line per call: "NAME ok PARTITIONS" or "NAME ExceptionClass: message".
// Usage: CreateTopicsScenario BOOTSTRAP
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.concurrent.ExecutionException;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.clients.admin.CreateTopicsOptions;
import org.apache.kafka.clients.admin.CreateTopicsResult;
import org.apache.kafka.clients.admin.NewTopic;

public final class CreateTopicsScenario {
    static void create(Admin admin, NewTopic topic, boolean validateOnly) throws Exception {
        CreateTopicsResult r = admin.createTopics(List.of(topic), new CreateTopicsOptions().validateOnly(validateOnly));
        try {
            r.all().get();
            Check.out(topic.name() + " ok " + r.numPartitions(topic.name()).get()
                    + " configs=" + !r.config(topic.name()).get().entries().isEmpty());
        } catch (ExecutionException e) {
            Check.out(topic.name() + " " + e.getCause().getClass().getSimpleName() + ": " + e.getCause().getMessage());
        }
    }

    static void alter(Admin admin, String topic, String name, String value) throws Exception {
        ConfigResource resource = new ConfigResource(ConfigResource.Type.TOPIC, topic);
        AlterConfigOp op = new AlterConfigOp(new ConfigEntry(name, value), AlterConfigOp.OpType.SET);
        try {
            admin.incrementalAlterConfigs(Map.of(resource, List.of(op))).all().get();
            Check.out("alter " + name + " ok");
        } catch (ExecutionException e) {
            Check.out("alter " + name + " " + e.getCause().getClass().getSimpleName() + ": " + e.getCause().getMessage());
        }
    }

    public static void main(String[] args) throws Exception {
        try (Admin admin = Admin.create(Check.props(args[0]))) {
            int node = admin.describeCluster().nodes().get().iterator().next().id();
            create(admin, new NewTopic("ct-validate", 3, (short) 1), true);
            create(admin, new NewTopic("ct-assigned", Map.of(0, List.of(node), 1, List.of(node))), false);
            create(admin, new NewTopic("ct-assigned-v", Map.of(0, List.of(node))), true);
            create(admin, new NewTopic("ct-no-broker", Map.of(0, List.of(node + 7))), false);
            create(admin, new NewTopic("ct-gap", Map.of(0, List.of(node), 2, List.of(node))), false);
            create(admin, new NewTopic("ct-twice", Map.of(0, List.of(node, node))), false);
            create(admin, new NewTopic("ct-empty", Map.of(0, List.<Integer>of())), false);
            create(admin, new NewTopic("ct-zero", Optional.of(0), Optional.empty()), false);
            create(admin, new NewTopic("ct-rf0", Optional.of(1), Optional.of((short) 0)), false);
            create(admin, new NewTopic("ct-assigned", 1, (short) 1), true);
            // Kafka 3.x topic configs that Kafka 4.x removed, and a segment.bytes below 1 MiB.
            create(admin, new NewTopic("ct-mfv", 1, (short) 1).configs(Map.of("message.format.version", "2.8")), false);
            create(admin, new NewTopic("ct-tdm", 1, (short) 1)
                    .configs(Map.of("message.timestamp.difference.max.ms", "1000")), true);
            create(admin, new NewTopic("ct-seg", 1, (short) 1).configs(Map.of("segment.bytes", "1024")), false);
            alter(admin, "ct-assigned", "message.downconversion.enable", "false");
            Check.out("topics " + new java.util.TreeSet<>(admin.listTopics().names().get()));
            Check.out("assigned partitions "
                    + admin.describeTopics(List.of("ct-assigned")).allTopicNames().get().get("ct-assigned").partitions().size());
        }
        Check.out("OK create-topics");
    }
}
