// A consumer of many partitions (incremental fetch sessions, KIP-227): creates TOPIC with
// PARTITIONS partitions, sends one record to each, assigns them all, reads them back,
// then keeps polling the idle partitions for IDLE_MS (fetches with nothing to send).
// Usage: ManyPartitionsConsumer BOOTSTRAP TOPIC PARTITIONS IDLE_MS
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Properties;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public final class ManyPartitionsConsumer {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        String topic = args[1];
        int partitions = Integer.parseInt(args[2]);
        long idleMs = Long.parseLong(args[3]);
        try (Admin admin = Admin.create(Check.props(bootstrap))) {
            admin.createTopics(List.of(new NewTopic(topic, partitions, (short) 1))).all().get();
        }
        Properties pp = Check.props(bootstrap);
        pp.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        pp.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        pp.put(ProducerConfig.LINGER_MS_CONFIG, "20");
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(pp)) {
            for (int p = 0; p < partitions; p++) {
                producer.send(new ProducerRecord<>(topic, p, "k", "v" + p));
            }
            producer.flush();
        }
        Properties cp = Check.props(bootstrap);
        cp.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        cp.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        cp.put(ConsumerConfig.FETCH_MAX_WAIT_MS_CONFIG, "100");
        List<TopicPartition> tps = new ArrayList<>();
        for (int p = 0; p < partitions; p++) {
            tps.add(new TopicPartition(topic, p));
        }
        int read = 0;
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(cp)) {
            consumer.assign(tps);
            consumer.seekToBeginning(tps);
            long deadline = System.currentTimeMillis() + 60_000;
            while (read < partitions && System.currentTimeMillis() < deadline) {
                ConsumerRecords<String, String> records = consumer.poll(Duration.ofMillis(200));
                read += records.count();
            }
            Check.that(read == partitions, "read " + read + " of " + partitions);
            long idleEnd = System.currentTimeMillis() + idleMs;
            while (System.currentTimeMillis() < idleEnd) {
                Check.that(consumer.poll(Duration.ofMillis(100)).isEmpty(), "unexpected records");
            }
        }
        Check.out("OK many read=" + read);
    }
}
