// An idempotent KafkaProducer with its defaults (acks=all, enable.idempotence=true in
// kafka-clients 4.x), as Spark's Kafka sink uses it. Sends `count` records round-robin
// over `partitions` partitions with explicit timestamps (base + i) and checks that the
// offsets the broker assigns are dense per partition.
// Usage: ProducerScenario BOOTSTRAP TOPIC COUNT PARTITIONS TIMESTAMP_BASE [PAUSE_EVERY]
// PAUSE_EVERY > 0 sleeps 1 ms after every that many sends, so a test can act mid-stream.
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.Future;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.serialization.StringSerializer;

public final class ProducerScenario {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        String topic = args[1];
        int count = Integer.parseInt(args[2]);
        int partitions = Integer.parseInt(args[3]);
        long tsBase = Long.parseLong(args[4]);
        int pauseEvery = args.length > 5 ? Integer.parseInt(args[5]) : 0;
        Properties p = Check.props(bootstrap);
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        p.put(ProducerConfig.LINGER_MS_CONFIG, "5");
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(p)) {
            List<Future<RecordMetadata>> sent = new ArrayList<>();
            for (int i = 0; i < count; i++) {
                sent.add(producer.send(new ProducerRecord<>(
                        topic, i % partitions, tsBase + i, "k-" + i, "v-" + i)));
                if (pauseEvery > 0 && i % pauseEvery == pauseEvery - 1) {
                    Thread.sleep(1);
                }
            }
            producer.flush();
            Map<Integer, Long> next = new HashMap<>();
            for (int i = 0; i < count; i++) {
                RecordMetadata md = sent.get(i).get();
                long expected = next.getOrDefault(md.partition(), -1L);
                Check.that(expected < 0 || md.offset() == expected,
                        "offset " + md.offset() + " on partition " + md.partition()
                        + ", expected " + expected);
                next.put(md.partition(), md.offset() + 1);
                Check.out("P " + md.partition() + " " + md.offset() + " " + md.timestamp());
            }
        }
        Check.out("OK produce " + count);
    }
}
