// A KafkaConsumer without a group: `assign` every partition, `seekToBeginning`, read all
// COUNT records, then `seek` to the middle of partition 0 and read the rest again;
// offsets must be dense and the re-read identical.
// Usage: AssignConsumer BOOTSTRAP TOPIC PARTITIONS COUNT
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;

public final class AssignConsumer {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        String topic = args[1];
        int partitions = Integer.parseInt(args[2]);
        int count = Integer.parseInt(args[3]);
        Properties p = Check.props(bootstrap);
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "none");
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(p)) {
            List<TopicPartition> tps = new ArrayList<>();
            for (int i = 0; i < partitions; i++) {
                tps.add(new TopicPartition(topic, i));
            }
            consumer.assign(tps);
            consumer.seekToBeginning(tps);
            Map<Integer, List<ConsumerRecord<String, String>>> got = new HashMap<>();
            int seen = 0;
            long deadline = System.currentTimeMillis() + 30_000;
            while (seen < count && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(500))) {
                    List<ConsumerRecord<String, String>> list =
                            got.computeIfAbsent(r.partition(), k -> new ArrayList<>());
                    Check.that(list.size() == r.offset(),
                            "partition " + r.partition() + ": offset " + r.offset()
                            + " after " + list.size() + " records");
                    list.add(r);
                    seen++;
                }
            }
            Check.that(seen == count, "read " + seen + " of " + count);
            List<ConsumerRecord<String, String>> p0 = got.get(0);
            int middle = p0.size() / 2;
            TopicPartition tp0 = new TopicPartition(topic, 0);
            consumer.seek(tp0, middle);
            consumer.pause(tps.subList(1, tps.size()));
            int reread = 0;
            deadline = System.currentTimeMillis() + 30_000;
            while (middle + reread < p0.size() && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(500))) {
                    ConsumerRecord<String, String> first = p0.get(middle + reread);
                    Check.that(r.offset() == first.offset() && r.value().equals(first.value()),
                            "re-read differs at offset " + r.offset());
                    reread++;
                }
            }
            Check.that(middle + reread == p0.size(), "re-read " + reread + " records");
            Check.that(consumer.position(tp0) == p0.size(), "position " + consumer.position(tp0));
            Check.out("OK assign read=" + seen + " reread=" + reread);
        }
    }
}
