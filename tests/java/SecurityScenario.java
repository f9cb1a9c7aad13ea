// The Java client over SASL_SSL: the AdminClient (as a super user) creates a SCRAM user
// and ACLs and lists both; the new user then produces and consumes with SCRAM-SHA-256
// where the ACLs allow it and is refused where they do not. Prints "OK security".
// Usage: SecurityScenario BOOTSTRAP CA_PEM ADMIN_PASSWORD TOPIC
import java.time.Duration;
import java.util.Collection;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.ExecutionException;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.ScramCredentialInfo;
import org.apache.kafka.clients.admin.ScramMechanism;
import org.apache.kafka.clients.admin.UserScramCredentialUpsertion;
import org.apache.kafka.clients.admin.UserScramCredentialsDescription;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.acl.AccessControlEntry;
import org.apache.kafka.common.acl.AclBinding;
import org.apache.kafka.common.acl.AclBindingFilter;
import org.apache.kafka.common.acl.AclOperation;
import org.apache.kafka.common.acl.AclPermissionType;
import org.apache.kafka.common.errors.TopicAuthorizationException;
import org.apache.kafka.common.resource.PatternType;
import org.apache.kafka.common.resource.ResourcePattern;
import org.apache.kafka.common.resource.ResourceType;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public final class SecurityScenario {
    static Properties sasl(String bootstrap, String ca, String mechanism, String user, String password) {
        Properties p = Check.props(bootstrap);
        p.put("security.protocol", "SASL_SSL");
        p.put("ssl.truststore.type", "PEM");
        p.put("ssl.truststore.location", ca);
        p.put("sasl.mechanism", mechanism);
        String module = mechanism.equals("PLAIN")
            ? "org.apache.kafka.common.security.plain.PlainLoginModule"
            : "org.apache.kafka.common.security.scram.ScramLoginModule";
        p.put("sasl.jaas.config", module + " required username=\"" + user + "\" password=\"" + password + "\";");
        return p;
    }

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], ca = args[1], adminPassword = args[2], topic = args[3];
        String user = "erin", password = "erin-secret";
        String denied = topic + "-denied";
        try (Admin admin = Admin.create(sasl(bootstrap, ca, "SCRAM-SHA-512", "admin", adminPassword))) {
            admin.createTopics(List.of(new NewTopic(topic, 1, (short) 1), new NewTopic(denied, 1, (short) 1))).all().get();
            admin.alterUserScramCredentials(List.of(new UserScramCredentialUpsertion(
                user, new ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), password))).all().get();
            Map<String, UserScramCredentialsDescription> users = admin.describeUserScramCredentials().all().get();
            Check.that(users.containsKey(user), "users: " + users.keySet());
            Check.that(users.get(user).credentialInfos().get(0).mechanism() == ScramMechanism.SCRAM_SHA_256,
                "erin's mechanism: " + users.get(user));
            String principal = "User:" + user;
            admin.createAcls(List.of(
                new AclBinding(new ResourcePattern(ResourceType.TOPIC, topic, PatternType.LITERAL),
                    new AccessControlEntry(principal, "*", AclOperation.WRITE, AclPermissionType.ALLOW)),
                new AclBinding(new ResourcePattern(ResourceType.TOPIC, topic, PatternType.LITERAL),
                    new AccessControlEntry(principal, "*", AclOperation.READ, AclPermissionType.ALLOW)),
                new AclBinding(new ResourcePattern(ResourceType.GROUP, "java-", PatternType.PREFIXED),
                    new AccessControlEntry(principal, "*", AclOperation.READ, AclPermissionType.ALLOW))
            )).all().get();
            Collection<AclBinding> acls = admin.describeAcls(AclBindingFilter.ANY).values().get();
            long mine = acls.stream().filter(b -> b.entry().principal().equals(principal)).count();
            Check.that(mine == 3, "erin's ACLs: " + acls);
            Check.out("users=" + users.size() + " acls=" + acls.size());
        }
        Properties producerProps = sasl(bootstrap, ca, "SCRAM-SHA-256", user, password);
        producerProps.put("key.serializer", StringSerializer.class.getName());
        producerProps.put("value.serializer", StringSerializer.class.getName());
        producerProps.put("max.block.ms", "20000");
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(producerProps)) {
            producer.send(new ProducerRecord<>(topic, "k", "hello")).get();
            try {
                producer.send(new ProducerRecord<>(denied, "k", "no")).get();
                Check.that(false, "produce to " + denied + " was allowed");
            } catch (ExecutionException e) {
                Check.that(e.getCause() instanceof TopicAuthorizationException, "denied produce: " + e.getCause());
            }
        }
        Properties consumerProps = sasl(bootstrap, ca, "SCRAM-SHA-256", user, password);
        consumerProps.put("group.id", "java-sec");
        consumerProps.put("auto.offset.reset", "earliest");
        consumerProps.put("key.deserializer", StringDeserializer.class.getName());
        consumerProps.put("value.deserializer", StringDeserializer.class.getName());
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(consumerProps)) {
            consumer.subscribe(List.of(topic));
            long deadline = System.currentTimeMillis() + 30000;
            boolean found = false;
            while (!found && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(500))) {
                    found |= r.value().equals("hello");
                }
            }
            Check.that(found, "record not consumed");
            consumer.commitSync();
        }
        Check.out("OK security");
    }
}
