// A compacted topic through kafka-clients: `produce` creates TOPIC (cleanup.policy=compact,
// small segment.ms and min.cleanable.dirty.ratio), sends ROUNDS rounds of updates to keys
// k0..k9 with an lz4 idempotent producer (one batch each), tombstones for k1 and k2 and a
// last record, printing "P offset key value"; a record without a key must fail with
// InvalidRecordException, and so must exactly the keyless one of a batch of three (record
// errors, KIP-467). `consume` assigns the partition, seeks to the beginning and
// prints "C offset key value" up to the end offset (value "null" for a tombstone).
// Usage: CompactedScenario BOOTSTRAP TOPIC produce ROUNDS | consume
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.ExecutionException;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.InvalidRecordException;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public final class CompactedScenario {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        String topic = args[1];
        if (args[2].equals("produce")) {
            produce(bootstrap, topic, Integer.parseInt(args[3]));
        } else {
            consume(bootstrap, topic);
        }
    }

    static void produce(String bootstrap, String topic, int rounds) throws Exception {
        try (Admin admin = Admin.create(Check.props(bootstrap))) {
            admin.createTopics(List.of(new NewTopic(topic, 1, (short) 1).configs(Map.of(
                    "cleanup.policy", "compact", "segment.ms", "100",
                    "min.cleanable.dirty.ratio", "0.01")))).all().get();
        }
        Properties p = Check.props(bootstrap);
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        p.put(ProducerConfig.COMPRESSION_TYPE_CONFIG, "lz4");
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(p)) {
            for (int r = 0; r < rounds; r++) {
                for (int k = 0; k < 10; k++) {
                    send(producer, topic, "k" + k, "v" + k + "-" + r);
                }
            }
            send(producer, topic, "k1", null);
            send(producer, topic, "k2", null);
            send(producer, topic, "k0", "last");
        }
        Properties q = Check.props(bootstrap);
        q.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        q.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        q.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "false");
        q.put(ProducerConfig.RETRIES_CONFIG, "0");
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(q)) {
            producer.send(new ProducerRecord<>(topic, null, "no key")).get();
            throw new AssertionError("a record without a key was accepted");
        } catch (ExecutionException e) {
            Check.that(e.getCause() instanceof InvalidRecordException, "got " + e.getCause());
            Check.out("OK keyless-refused " + e.getCause().getMessage());
        }
        // One batch of three records, the middle one keyless: ProduceResponse's record_errors
        // make the client fail exactly that record with InvalidRecordException, the other
        // two with the generic "part of a batch which had invalid records" exception.
        q.put(ProducerConfig.LINGER_MS_CONFIG, "60000");
        q.put(ProducerConfig.BATCH_SIZE_CONFIG, "1000000");
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(q)) {
            List<java.util.concurrent.Future<RecordMetadata>> sent = List.of(
                    producer.send(new ProducerRecord<>(topic, 0, "a", "in batch")),
                    producer.send(new ProducerRecord<>(topic, 0, null, "in batch, no key")),
                    producer.send(new ProducerRecord<>(topic, 0, "c", "in batch")));
            producer.flush();
            StringBuilder outcome = new StringBuilder("record-errors");
            for (java.util.concurrent.Future<RecordMetadata> f : sent) {
                try {
                    f.get();
                    outcome.append(" accepted");
                } catch (ExecutionException e) {
                    outcome.append(" ").append(e.getCause().getClass().getSimpleName());
                    if (e.getCause() instanceof InvalidRecordException) {
                        Check.out("record error: " + e.getCause().getMessage());
                    }
                }
            }
            Check.out(outcome.toString());
        }
        Check.out("OK produce");
    }

    static void send(KafkaProducer<String, String> producer, String topic, String key, String value)
            throws Exception {
        RecordMetadata md = producer.send(new ProducerRecord<>(topic, 0, key, value)).get();
        Check.out("P " + md.offset() + " " + key + " " + value);
    }

    static void consume(String bootstrap, String topic) {
        Properties p = Check.props(bootstrap);
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(p)) {
            TopicPartition tp = new TopicPartition(topic, 0);
            consumer.assign(List.of(tp));
            consumer.seekToBeginning(List.of(tp));
            long end = consumer.endOffsets(List.of(tp)).get(tp);
            long deadline = System.currentTimeMillis() + 30_000;
            while (consumer.position(tp) < end && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(500))) {
                    Check.out("C " + r.offset() + " " + r.key() + " " + r.value());
                }
            }
            Check.that(consumer.position(tp) >= end, "stopped at " + consumer.position(tp));
        }
        Check.out("OK consume");
    }
}
