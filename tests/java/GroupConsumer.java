// A KafkaConsumer that `subscribe`s in a group and keeps consuming until STOP_FILE
// exists (the pytest side creates it once every record is accounted for). After each
// poll it commits synchronously (explicit offsets) what it read, so the group consumes
// every record exactly once across rebalances. Prints "A p,p,..." on every assignment,
// "R partition offset value" for every record read, "D partition offset" for every
// record whose commit the broker acknowledged, "X error" for a failed commit (those
// reads do not count) -- the protocol of tests/groups/member.py.
// Usage: GroupConsumer BOOTSTRAP TOPIC GROUP STOP_FILE ASSIGNOR [INSTANCE_ID]
// (ASSIGNOR "consumer:uniform" or "consumer:range": group.protocol=consumer, KIP-848)
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.Collection;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.TreeSet;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;

public final class GroupConsumer {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        String topic = args[1];
        String group = args[2];
        Path stop = Path.of(args[3]);
        String assignor = args[4];
        Properties p = Check.props(bootstrap);
        p.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        p.put(ConsumerConfig.MAX_POLL_INTERVAL_MS_CONFIG, "30000");
        p.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, "50");
        if (assignor.startsWith("consumer:")) {
            // KIP-848: the broker assigns and sets session and heartbeat timing.
            p.put(ConsumerConfig.GROUP_PROTOCOL_CONFIG, "consumer");
            p.put(ConsumerConfig.GROUP_REMOTE_ASSIGNOR_CONFIG, assignor.substring("consumer:".length()));
        } else {
            p.put(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, "6000");
            p.put(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG, "1000");
            p.put(ConsumerConfig.PARTITION_ASSIGNMENT_STRATEGY_CONFIG, assignorClass(assignor));
        }
        if (args.length > 5) {
            p.put(ConsumerConfig.GROUP_INSTANCE_ID_CONFIG, args[5]);
        }
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(p)) {
            consumer.subscribe(List.of(topic), new ConsumerRebalanceListener() {
                @Override
                public void onPartitionsRevoked(Collection<TopicPartition> partitions) {
                    // Nothing to do: every poll's reads are committed before the next poll.
                }

                @Override
                public void onPartitionsAssigned(Collection<TopicPartition> partitions) {
                    TreeSet<Integer> ids = new TreeSet<>();
                    for (TopicPartition tp : consumer.assignment()) {
                        ids.add(tp.partition());
                    }
                    StringBuilder sb = new StringBuilder("A ");
                    for (int id : ids) {
                        sb.append(id).append(',');
                    }
                    Check.out(sb.toString());
                }
            });
            while (!Files.exists(stop)) {
                ConsumerRecords<String, String> records = consumer.poll(Duration.ofMillis(200));
                Map<TopicPartition, OffsetAndMetadata> next = new HashMap<>();
                for (ConsumerRecord<String, String> r : records) {
                    Check.out("R " + r.partition() + " " + r.offset() + " " + r.value());
                    next.put(new TopicPartition(r.topic(), r.partition()), new OffsetAndMetadata(r.offset() + 1));
                }
                if (records.isEmpty()) {
                    continue;
                }
                try {
                    consumer.commitSync(next);
                } catch (KafkaException e) {
                    Check.out("X " + e.getClass().getSimpleName());
                    continue;
                }
                for (ConsumerRecord<String, String> r : records) {
                    Check.out("D " + r.partition() + " " + r.offset());
                }
            }
        }
        Check.out("OK closed");
    }

    static String assignorClass(String name) {
        switch (name) {
            case "range":
                return "org.apache.kafka.clients.consumer.RangeAssignor";
            case "roundrobin":
                return "org.apache.kafka.clients.consumer.RoundRobinAssignor";
            case "sticky":
                return "org.apache.kafka.clients.consumer.StickyAssignor";
            case "cooperative-sticky":
                return "org.apache.kafka.clients.consumer.CooperativeStickyAssignor";
            default:
                throw new IllegalArgumentException(name);
        }
    }
}
