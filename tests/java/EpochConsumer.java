// Leader epochs as the Java consumer uses them (KIP-320): the epoch of fetched records,
// committed with the offset, and the position validated with OffsetForLeaderEpoch when a
// consumer resumes from a committed offset or seeks to an offset with an epoch.
// Usage: EpochConsumer BOOTSTRAP TOPIC COUNT
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public final class EpochConsumer {
    static void produce(String bootstrap, String topic, int from, int count) throws Exception {
        Properties pp = Check.props(bootstrap);
        pp.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        pp.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(pp)) {
            for (int i = from; i < from + count; i++) {
                producer.send(new ProducerRecord<>(topic, 0, "k", "v" + i)).get();
            }
        }
    }

    static List<ConsumerRecord<String, String>> read(KafkaConsumer<String, String> c, int n) {
        List<ConsumerRecord<String, String>> out = new ArrayList<>();
        long deadline = System.currentTimeMillis() + 30_000;
        while (out.size() < n && System.currentTimeMillis() < deadline) {
            c.poll(Duration.ofMillis(200)).forEach(out::add);
        }
        Check.that(out.size() == n, "read " + out.size() + " of " + n);
        return out;
    }

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        String topic = args[1];
        int count = Integer.parseInt(args[2]);
        try (Admin admin = Admin.create(Check.props(bootstrap))) {
            admin.createTopics(List.of(new NewTopic(topic, 1, (short) 1))).all().get();
        }
        produce(bootstrap, topic, 0, count);
        TopicPartition tp = new TopicPartition(topic, 0);
        Properties cp = Check.props(bootstrap);
        cp.put(ConsumerConfig.GROUP_ID_CONFIG, "epochs");
        cp.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        cp.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        cp.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        try (KafkaConsumer<String, String> c = new KafkaConsumer<>(cp)) {
            c.assign(List.of(tp));
            c.seekToBeginning(List.of(tp));
            List<ConsumerRecord<String, String>> got = read(c, count);
            Optional<Integer> epoch = got.get(count - 1).leaderEpoch();
            Check.that(epoch.isPresent(), "records carry no leader epoch");
            Check.out("record epoch " + epoch.get());
            c.commitSync();
            Map<TopicPartition, OffsetAndMetadata> committed = c.committed(java.util.Set.of(tp));
            Check.out("committed " + committed.get(tp).offset() + " epoch "
                    + committed.get(tp).leaderEpoch().orElse(-1));
        }
        produce(bootstrap, topic, count, 5);
        try (KafkaConsumer<String, String> c = new KafkaConsumer<>(cp)) {
            // Resumes from the committed offset and its epoch: validated first.
            c.assign(List.of(tp));
            List<ConsumerRecord<String, String>> got = read(c, 5);
            Check.that(got.get(0).offset() == count, "resumed at " + got.get(0).offset());
            Check.out("resumed read=5");
            // A seek with an epoch is validated too.
            c.seek(tp, new OffsetAndMetadata(2, Optional.of(0), ""));
            got = read(c, count + 3);
            Check.that(got.get(0).offset() == 2, "seek read from " + got.get(0).offset());
            Check.out("seek read=" + got.size());
        }
        Check.out("OK epochs");
    }
}
