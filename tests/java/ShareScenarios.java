// KIP-932 share groups with kafka-clients 4.3's KafkaShareConsumer.
// Usage:
//   ShareScenarios BOOTSTRAP config GROUP KEY VALUE   (IncrementalAlterConfigs on the group)
//   ShareScenarios BOOTSTRAP consume GROUP TOPIC MODE IDLE_MS MAX_MS [STOP_FILE]
//   ShareScenarios BOOTSTRAP admin GROUP                (lists, describes, offsets)
//   ShareScenarios BOOTSTRAP delete GROUP               (deleteShareGroups)
//   ShareScenarios BOOTSTRAP alter GROUP TOPIC P=OFFSET...  (alterShareGroupOffsets)
// consume prints "R <partition> <offset> <delivery count> <value> <ack>" for every record
// it is given and acknowledges it by MODE: accept; release-first (RELEASE at the first
// delivery, ACCEPT after); release (always RELEASE); reject-odd (REJECT odd values, ACCEPT
// the others); hold (no acknowledgement: keeps its records until killed). After each
// commitSync that succeeded for every partition it prints "C <offset>,<offset>...". Before
// the R lines of a poll and before each C line it prints "T <wall clock ms>" (when that poll
// or commit returned), so the logs of several consumers can be merged in time. It
// stops after IDLE_MS without records once it has had some (with STOP_FILE: once that file
// exists instead), or after MAX_MS, and prints "OK consume n=<records>".
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Optional;
import java.util.Set;
import java.util.Map;
import java.util.Properties;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.GroupListing;
import org.apache.kafka.clients.admin.ListGroupsOptions;
import org.apache.kafka.clients.admin.ListShareGroupOffsetsSpec;
import org.apache.kafka.clients.admin.SharePartitionOffsetInfo;
import org.apache.kafka.clients.admin.ShareGroupDescription;
import org.apache.kafka.clients.admin.ShareMemberDescription;
import org.apache.kafka.common.GroupType;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.clients.consumer.AcknowledgeType;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicIdPartition;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.serialization.StringDeserializer;

public final class ShareScenarios {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        switch (args[1]) {
            case "config" -> config(bootstrap, args[2], args[3], args[4]);
            case "admin" -> admin(bootstrap, args[2]);
            case "delete" -> delete(bootstrap, args[2]);
            case "alter" -> alter(bootstrap, args[2], args[3],
                    java.util.Arrays.copyOfRange(args, 4, args.length));
            case "consume" -> consume(bootstrap, args[2], args[3], args[4],
                    Long.parseLong(args[5]), Long.parseLong(args[6]),
                    args.length > 7 ? java.nio.file.Path.of(args[7]) : null);
            default -> throw new IllegalArgumentException(args[1]);
        }
    }

    static void config(String bootstrap, String group, String key, String value) throws Exception {
        try (Admin admin = Admin.create(Check.props(bootstrap))) {
            ConfigResource r = new ConfigResource(ConfigResource.Type.GROUP, group);
            AlterConfigOp op = new AlterConfigOp(new ConfigEntry(key, value), AlterConfigOp.OpType.SET);
            admin.incrementalAlterConfigs(Map.of(r, List.of(op))).all().get();
        }
        Check.out("OK config " + key + "=" + value);
    }

    static void admin(String bootstrap, String group) throws Exception {
        try (Admin admin = Admin.create(Check.props(bootstrap))) {
            for (GroupListing g : admin.listGroups(
                    new ListGroupsOptions().withTypes(Set.of(GroupType.SHARE))).all().get()) {
                Check.out("GROUP " + g.groupId() + " " + g.type().orElse(null) + " "
                        + g.groupState().orElse(null));
            }
            ShareGroupDescription d = admin.describeShareGroups(List.of(group)).all().get().get(group);
            Check.out("DESCRIBE " + d.groupId() + " " + d.groupState() + " members=" + d.members().size());
            for (ShareMemberDescription m : d.members()) {
                Check.out("MEMBER " + m.assignment().topicPartitions());
            }
            Map<TopicPartition, SharePartitionOffsetInfo> offsets = admin.listShareGroupOffsets(
                    Map.of(group, new ListShareGroupOffsetsSpec())).partitionsToOffsetInfo(group).get();
            for (Map.Entry<TopicPartition, SharePartitionOffsetInfo> e : offsets.entrySet()) {
                Check.out("OFFSET " + e.getKey() + " start=" + e.getValue().startOffset()
                        + " lag=" + e.getValue().lag().orElse(-1L));
            }
        }
        Check.out("OK admin");
    }

    static void alter(String bootstrap, String group, String topic, String[] offsets) throws Exception {
        Map<TopicPartition, Long> wanted = new java.util.HashMap<>();
        for (String o : offsets) {
            String[] po = o.split("=");
            wanted.put(new TopicPartition(topic, Integer.parseInt(po[0])), Long.parseLong(po[1]));
        }
        try (Admin admin = Admin.create(Check.props(bootstrap))) {
            admin.alterShareGroupOffsets(group, wanted).all().get();
        }
        Check.out("OK alter");
    }

    static void delete(String bootstrap, String group) throws Exception {
        try (Admin admin = Admin.create(Check.props(bootstrap))) {
            admin.deleteShareGroups(List.of(group)).all().get();
            Check.that(admin.listGroups(new ListGroupsOptions().withTypes(Set.of(GroupType.SHARE)))
                    .all().get().stream().noneMatch(g -> g.groupId().equals(group)), "still listed");
        }
        Check.out("OK delete");
    }

    static void consume(String bootstrap, String group, String topic, String mode, long idleMs,
                        long maxMs, java.nio.file.Path stop) throws Exception {
        Properties p = Check.props(bootstrap);
        p.put("group.id", group);
        p.put("key.deserializer", StringDeserializer.class.getName());
        p.put("value.deserializer", StringDeserializer.class.getName());
        p.put("share.acknowledgement.mode", "explicit");
        p.put("max.poll.records", "5");
        int n = 0;
        long start = System.currentTimeMillis();
        long last = start;
        try (KafkaShareConsumer<String, String> c = new KafkaShareConsumer<>(p)) {
            c.subscribe(List.of(topic));
            Check.out("SUBSCRIBED");
            while (true) {
                long now = System.currentTimeMillis();
                boolean done = stop != null ? java.nio.file.Files.exists(stop) : n > 0 && now - last > idleMs;
                if (now - start > maxMs || done) {
                    break;
                }
                ConsumerRecords<String, String> records = c.poll(Duration.ofMillis(200));
                List<String> acked = new ArrayList<>();
                if (!records.isEmpty()) {
                    Check.out("T " + System.currentTimeMillis());
                }
                for (ConsumerRecord<String, String> r : records) {
                    int count = r.deliveryCount().map(Short::intValue).orElse(-1);
                    AcknowledgeType ack = switch (mode) {
                        case "accept" -> AcknowledgeType.ACCEPT;
                        case "release-first" -> count <= 1 ? AcknowledgeType.RELEASE : AcknowledgeType.ACCEPT;
                        case "release" -> AcknowledgeType.RELEASE;
                        case "reject-odd" -> Integer.parseInt(r.value().substring(2)) % 2 == 1
                                ? AcknowledgeType.REJECT : AcknowledgeType.ACCEPT;
                        case "hold" -> null;
                        default -> throw new IllegalArgumentException(mode);
                    };
                    Check.out("R " + r.partition() + " " + r.offset() + " " + count + " " + r.value()
                            + " " + (ack == null ? "HOLD" : ack.name()));
                    if (ack != null) {
                        c.acknowledge(r, ack);
                        acked.add(Long.toString(r.offset()));
                    }
                    n++;
                    last = System.currentTimeMillis();
                }
                if (!records.isEmpty() && !mode.equals("hold")) {
                    try {
                        Map<TopicIdPartition, Optional<KafkaException>> result = c.commitSync();
                        if (result.values().stream().allMatch(Optional::isEmpty)) {
                            Check.out("T " + System.currentTimeMillis());
                            Check.out("C " + String.join(",", acked));
                        } else {
                            Check.out("COMMIT-FAILED " + result);
                        }
                    } catch (KafkaException e) {
                        Check.out("COMMIT-FAILED " + e);
                    }
                }
                if (mode.equals("hold") && n > 0) {
                    Check.out("HOLDING");
                    Thread.sleep(maxMs);
                }
            }
        }
        Check.out("OK consume n=" + n);
    }
}
