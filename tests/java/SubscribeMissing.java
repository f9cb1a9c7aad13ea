// A KafkaConsumer that subscribes to a topic that may not exist, with
// allow.auto.create.topics as given, and polls until it is assigned a partition or
// WAIT_MS pass. Prints "ASSIGNED n" (n partitions) or "UNASSIGNED".
// Usage: SubscribeMissing BOOTSTRAP TOPIC ALLOW_AUTO_CREATE WAIT_MS
import java.time.Duration;
import java.util.List;
import java.util.Properties;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

public final class SubscribeMissing {
    public static void main(String[] args) {
        Properties p = Check.props(args[0]);
        p.put(ConsumerConfig.GROUP_ID_CONFIG, "g-" + args[1]);
        p.put(ConsumerConfig.ALLOW_AUTO_CREATE_TOPICS_CONFIG, args[2]);
        p.put(ConsumerConfig.METADATA_MAX_AGE_CONFIG, "500");
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        long deadline = System.currentTimeMillis() + Long.parseLong(args[3]);
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(p)) {
            consumer.subscribe(List.of(args[1]));
            while (System.currentTimeMillis() < deadline) {
                consumer.poll(Duration.ofMillis(200));
                if (!consumer.assignment().isEmpty()) {
                    Check.out("ASSIGNED " + consumer.assignment().size());
                    return;
                }
            }
        }
        Check.out("UNASSIGNED");
    }
}
